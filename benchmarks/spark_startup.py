"""Time from ``tfdist run --backend spark`` to all tasks running, and how soon an exit is
noticed, against the local backend (and Ray with ``--with-ray``).

Starts a Spark standalone cluster on this machine (a master and two workers of 2 cores,
from the pyspark installation, as the tests do), then alternates runs of the same job
(chief + 2 workers of a task that prints the time and exits) on each backend. For each run:
the wall-clock time the CLI was launched and the time of the last task's ``running`` record
in ``<run_dir>/events.jsonl``; the whole run; and how long after a task's last act (printing
the time) its exit is recorded. Spark's figure includes the SparkSession (a JVM driver, an
application on the master, two executors) and the barrier stage's Python workers.

    python benchmarks/spark_startup.py [--runs 5] [--with-ray] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.ray_startup import medians, one_run  # noqa: E402
from tests.backends.spark.spark_cluster import StandaloneCluster, missing  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--with-ray", action="store_true", help="also time the Ray backend")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if missing():
        sys.exit(f"cannot start Spark here: {missing()}")

    t0 = time.monotonic()
    cluster = StandaloneCluster(workers=2, cores=2).start()
    cluster_up = time.monotonic() - t0
    ray_cluster = None
    rows: dict[str, list[dict[str, float]]] = {"local": [], "spark": []}
    try:
        backends = {
            "local": [],
            "spark": ["--backend", "spark", "--spark-master", cluster.master, "--set",
                      f"spark.master_ui={cluster.ui}"],
        }
        if args.with_ray:
            from ray.cluster_utils import Cluster

            ray_cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
            ray_cluster.add_node(num_cpus=2)
            ray_cluster.wait_for_nodes()
            backends["ray"] = ["--backend", "ray", "--ray-address", ray_cluster.address]
            rows["ray"] = []
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for _ in range(args.runs):  # alternate so drift in machine load hits all alike
                for name, extra in backends.items():
                    rows[name].append(one_run(extra, root / name, root))
    finally:
        cluster.stop()
        if ray_cluster is not None:
            ray_cluster.shutdown()
    result = {
        "runs": args.runs,
        "tasks": 3,
        "spark_cluster_start_s": round(cluster_up, 2),
        **{name: medians(r) for name, r in rows.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"Spark standalone cluster (2 workers x 2 cores) started in {result['spark_cluster_start_s']}s; "
          f"job: chief + 2 workers; median of {args.runs} runs (seconds)")
    print(f"{'':28} " + " ".join(f"{name:>8}" for name in rows))
    for key in rows["local"][0]:
        print(f"{key:28} " + " ".join(f"{result[name][key]:8.3f}" for name in rows))


if __name__ == "__main__":
    main()

"""Time from ``tfdist run`` to all tasks running on YARN: Spark on YARN with Spark's jars
staged cold (a new ``$TFDIST_HOME``: the archive is written and every NodeManager unpacks
it) and warm (the archive and the NodeManagers' cache reused), and ``--backend yarn``.

Needs the test cluster (``make yarn-up``; ``HADOOP_CONF_DIR`` is set to ``.yarn/conf``). The
job is the launch benchmarks' (chief + 2 workers of a task that prints the time and exits);
the three kinds alternate so drift in machine load hits all alike.

    python benchmarks/yarn_startup.py [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ray_startup import medians, one_run  # noqa: E402
from tests.backends.yarn.yarn_cluster import CONF, why_unavailable  # noqa: E402

#: Every address on loopback, and one executor per task (Spark on YARN starts 2 by default).
LOOPBACK = ("spark.conf={spark.driver.host: 127.0.0.1, spark.driver.bindAddress: 127.0.0.1, "
            "spark.executor.instances: '3'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    why = why_unavailable()
    if why:
        sys.exit(why)
    os.environ["HADOOP_CONF_DIR"] = str(CONF)
    # a loaded machine starts executors slowly: wait for them as long as --backend yarn does
    spark = ["--backend", "spark", "--spark-master", "yarn", "--set", LOOPBACK,
             "--set", "spark.placement_timeout_seconds=300"]
    kinds = ["spark_cold", "spark_warm", "yarn"]
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        work = root / "work"  # the job's (empty) workdir: the homes beside it hold the staged jars
        work.mkdir()
        warm_home = root / "warm-home"
        os.environ["TFDIST_HOME"] = str(warm_home)
        one_run(spark, root / "prime", work)  # the warm kind's archive and NodeManager cache
        for i in range(args.runs):
            for kind in kinds:
                home = root / f"cold-home-{i}" if kind == "spark_cold" else warm_home
                os.environ["TFDIST_HOME"] = str(home)
                backend = ["--backend", "yarn"] if kind == "yarn" else spark
                began = time.monotonic()
                rows[kind].append(one_run(backend, root / kind, work))
                print(f"{kind} run {i + 1}: {time.monotonic() - began:.1f}s", file=sys.stderr)
    result = {"runs": args.runs, "tasks": 3, "load": os.getloadavg(), **{k: medians(r) for k, r in rows.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"YARN test cluster; job: chief + 2 workers; median of {args.runs} runs (seconds); "
          f"load at the end {result['load'][0]:.1f}")
    print(f"{'':28} " + " ".join(f"{k:>10}" for k in kinds))
    for key in rows[kinds[0]][0]:
        print(f"{key:28} " + " ".join(f"{result[k][key]:10.3f}" for k in kinds))


if __name__ == "__main__":
    main()

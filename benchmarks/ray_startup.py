"""Time from ``tfdist run --backend ray`` to all tasks running, against the local backend.

Starts a two-node Ray cluster on this machine (ray.cluster_utils.Cluster, 2 CPUs per node),
then alternates runs of the same job (chief + 2 workers of a task that exits at once) on
the local backend and on Ray. For each run: the wall-clock time the CLI was launched, and
the time of the last task's ``running`` record in ``<run_dir>/events.jsonl`` (recorded when
the backend's Started event arrives: the process exists on its node). Also the whole run,
and how long after a task's last act (printing the time) its exit is recorded.
Prints medians (and the first Ray run apart: the cluster's first job starts cold).

    python benchmarks/ray_startup.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
TFDIST = [PY, "-m", "tfdist.cli"]
TASK = ["--chief", "--workers", "2", "--", PY, "-c",
        "import time; print('EXIT_AT', repr(time.time()), flush=True)"]


def one_run(backend: list[str], runs_root: Path, cwd: Path) -> dict[str, float]:
    before = set(runs_root.iterdir()) if runs_root.exists() else set()
    launched = time.time()
    subprocess.run([*TFDIST, "run", "-q", "--runs-dir", str(runs_root), *backend, *TASK],
                   check=True, stdout=subprocess.DEVNULL, cwd=cwd)
    ended = time.time()
    (run_dir,) = set(runs_root.iterdir()) - before
    rows = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    pending = min(r["time"] for r in rows if r["state"] == "pending")
    running = [r["time"] for r in rows if r["state"] == "running"]
    assert len(running) == 3, rows
    lags = []
    for log in (run_dir / "logs").glob("*.log"):
        printed = next(ln for ln in log.read_text().splitlines() if ln.startswith("EXIT_AT"))
        noticed = next(r["time"] for r in rows if r["task"] == log.stem and r["state"] == "succeeded")
        lags.append(noticed - float(printed.split()[1]))
    return {
        "to_all_running_s": max(running) - launched,
        "to_first_pending_s": pending - launched,  # CLI start, connect, place, actors up
        "pending_to_all_running_s": max(running) - pending,
        "whole_run_s": ended - launched,
        "exit_notice_s": statistics.median(lags),  # last line printed -> exit recorded
    }


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        cluster_up = time.monotonic() - t0
        ray_args = ["--backend", "ray", "--ray-address", cluster.address]
        local, on_ray = [], []
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for _ in range(args.runs):  # alternate so drift in machine load hits both alike
                on_ray.append(one_run(ray_args, root / "ray", root))
                local.append(one_run([], root / "local", root))
    finally:
        cluster.shutdown()
    result = {
        "runs": args.runs,
        "tasks": 3,
        "cluster_start_s": round(cluster_up, 2),
        "local": medians(local),
        "ray": medians(on_ray),
        "ray_first_run": {k: round(v, 3) for k, v in on_ray[0].items()},
        "ray_minus_local_to_all_running_s": round(
            statistics.median(r["to_all_running_s"] for r in on_ray)
            - statistics.median(r["to_all_running_s"] for r in local), 3),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"2-node Ray cluster on this machine started in {result['cluster_start_s']}s; "
          f"job: chief + 2 workers; median of {args.runs} runs (seconds)")
    print(f"{'':28} {'local':>8} {'ray':>8} {'ray 1st':>8}")
    for key in local[0]:
        print(f"{key:28} {result['local'][key]:8.3f} {result['ray'][key]:8.3f} "
              f"{result['ray_first_run'][key]:8.3f}")


if __name__ == "__main__":
    main()

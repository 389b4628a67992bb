"""The cost of recording a 1,000-task job in the job store.

1,000 tasks x 3 transitions (pending, running, succeeded) plus the job's start and end go
through the recorder exactly as the supervisor calls it (``JobRecorder.on_transition`` with
frozen snapshots). Reported: the time the supervisor's thread spends in the hooks (it only
queues), the time until everything is in the store (the writer's batches, one transaction
each), and how many transactions that took. Goal: < 1 s in all.

    python benchmarks/record_1000.py [--tasks 1000] [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def once(tasks: int, home: Path) -> dict:
    from tfdist.jobs.recorder import JobRecorder
    from tfdist.jobs.store import Store
    from tfdist.jobspec import load
    from tfdist.states import JobState, TaskState
    from tfdist.supervisor.observer import JobSnapshot
    from tfdist.supervisor.result import JobResult
    from tfdist.supervisor.status import TaskStatus

    os.environ["TFDIST_HOME"] = str(home)
    job = load.from_dict({"name": "big", "command": ["train"], "roles": {"worker": tasks}}, "bench")
    run_dir = home / "run"
    run_dir.mkdir(exist_ok=True)
    snap = JobSnapshot("big", str(run_dir), time.time(), 0, 0)
    start = time.perf_counter()
    recorder = JobRecorder.start(job, run_dir, "local")
    for state in (TaskState.PENDING, TaskState.RUNNING, TaskState.SUCCEEDED):
        for i in range(tasks):
            task = TaskStatus(f"worker-{i}", "worker", i, state, pid=1000 + i, host="127.0.0.1",
                              address=f"127.0.0.1:{20000 + i}",
                              exit_code=0 if state is TaskState.SUCCEEDED else None, started_at=time.time())
            recorder.on_transition(snap, task, time.time())
    result = JobResult("big", JobState.SUCCEEDED, str(run_dir), snap.started_at, time.time(), 0, 0, ())
    recorder.on_finish(snap, result)
    hooks = time.perf_counter() - start
    assert recorder.close(timeout=60)
    total = time.perf_counter() - start
    store = Store()
    [row] = store.jobs()
    assert row.state is JobState.SUCCEEDED and len(store.tasks(row.id)) == tasks
    return {"hooks_s": hooks, "total_s": total, "transactions": recorder.writer.batches,
            "operations": recorder.writer.written}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            results.append(once(args.tasks, Path(tmp)))
    summary = {
        "tasks": args.tasks,
        "transitions": args.tasks * 3,
        "hooks_s_median": round(statistics.median(r["hooks_s"] for r in results), 3),
        "total_s_median": round(statistics.median(r["total_s"] for r in results), 3),
        "transactions": [r["transactions"] for r in results],
        "operations": results[0]["operations"],
    }
    if args.json:
        print(json.dumps(summary))
        return
    print(f"recording a {args.tasks}-task job ({summary['transitions']} transitions), "
          f"median of {args.runs}: supervisor hooks {summary['hooks_s_median']:.3f} s, "
          f"all in the store {summary['total_s_median']:.3f} s, "
          f"{summary['transactions']} transactions for {summary['operations']} operations")


if __name__ == "__main__":
    main()

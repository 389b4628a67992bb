"""Recovery time after a task is SIGKILLed: task death -> first training step after resume.

Scenarios (issue: fault tolerance): MultiWorkerMirrored with 3 workers (the whole group
restarts), and ParameterServer with a chief, 2 workers and 1 ps (a worker restarts alone;
a ps or the chief restarts ps + chief). Training is benchmarks/recovery_task.py, which
prints ``STEP <time>`` on every task at every step and checkpoints every few calls.

"Start-up" is the same measure for a fresh start (task started -> its first step): the
part of recovery that is TensorFlow's own start-up, not tfdist's. Recovery minus start-up
is what tfdist adds (noticing, stopping the group, restarting).

    python benchmarks/recovery.py [--runs 2] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TFDIST = [sys.executable, "-m", "tfdist.cli"]
# name: (tfdist arguments, role to kill, scheduled calls). A PSS worker restarts alone
# while training goes on without it, so that job runs longer for the worker to come back.
SCENARIOS = {
    "mwms-3w/worker": (["--workers", "3", "--strategy", "multi_worker_mirrored"], "worker", 40),
    "pss-2w1ps/worker": (["--chief", "--workers", "2", "--ps", "1"], "worker", 400),
    "pss-2w1ps/ps": (["--chief", "--workers", "2", "--ps", "1"], "ps", 40),
    "pss-2w1ps/chief": (["--chief", "--workers", "2", "--ps", "1"], "chief", 40),
}


def jsonl(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    return rows


def steps(log: Path, attempt: int | None = None) -> list[float]:
    """STEP times in a task's log (optionally only those of one attempt)."""
    out, current = [], 0
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("--- tfdist:") and " attempt " in line:
            current = int(line.split(" attempt ")[1].split()[0])
        elif line.startswith("STEP ") and (attempt is None or current == attempt):
            out.append(float(line.split()[1]))
    return out


def one_run(args_: list[str], role: str, calls: int, rng: random.Random, tmp: Path) -> dict:
    runs = tmp / "runs"
    cmd = [*TFDIST, "run", "-q", "--json", "--runs-dir", str(runs), *args_,
           "--set", "restart={policy: on-failure, max_restarts: 2, backoff_seconds: 0}",
           "--", "python", str(ROOT / "benchmarks" / "recovery_task.py"), "--calls", str(calls)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    victim = f"{role}-{rng.randrange(2) if role == 'worker' else 0}"
    killed = None
    while proc.poll() is None:
        dirs = list(runs.glob("*")) if runs.exists() else []
        if dirs and killed is None:
            progress = jsonl(dirs[0] / "progress.jsonl")
            if any(p.get("step", 0) >= 50 for p in progress):  # after the second checkpoint
                time.sleep(rng.uniform(0, 1))
                pid = [e["pid"] for e in jsonl(dirs[0] / "events.jsonl") if e["task"] == victim and e.get("pid")][-1]
                os.kill(pid, signal.SIGKILL)
                killed = time.time()
        time.sleep(0.02)
    result = json.loads(proc.stdout.read())
    run_dir = Path(result["run_dir"])
    logs = run_dir / "logs"
    events = jsonl(run_dir / "events.jsonl")
    if role == "worker":
        resumed = min(steps(logs / f"{victim}.log", attempt=1), default=None)
    else:
        restarted = min(e["time"] for e in events if e["task"] == victim and e["attempt"] == 1 and e["state"] == "running")
        resumed = min((t for w in logs.glob("worker-*.log") for t in steps(w) if t > restarted), default=None)
    first_start = min(e["time"] for e in events if e["state"] == "running")
    first_step = min(t for w in logs.glob("worker-*.log") for t in steps(w))
    return {"state": result["state"], "victim": victim, "restarts": result["restarts_used"],
            "recovery_s": None if resumed is None or killed is None else round(resumed - killed, 2),
            "startup_s": round(first_step - first_start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), help="run only these")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    table = {}
    for name, (cli_args, role, calls) in SCENARIOS.items():
        if args.only and name not in args.only:
            continue
        rows = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                rows.append(one_run(cli_args, role, calls, rng, Path(d)))
        rec = [r["recovery_s"] for r in rows if r["recovery_s"] is not None]
        table[name] = {
            "runs": len(rows), "kills": len(rows), "succeeded": sum(r["state"] == "succeeded" for r in rows),
            "recovered": len(rec),
            "recovery_mean_s": round(statistics.mean(rec), 2) if rec else None,
            "recovery_worst_s": max(rec) if rec else None,
            "startup_mean_s": round(statistics.mean(r["startup_s"] for r in rows), 2),
        }
    if args.json:
        print(json.dumps(table, indent=2))
        return
    print(f"{'scenario':20} runs ok recovered  mean  worst  (fresh start-up)")
    for name, t in table.items():
        print(f"{name:20} {t['runs']:4} {t['succeeded']:2} {t['recovered']:9} {t['recovery_mean_s']!s:>5}s "
              f"{t['recovery_worst_s']!s:>5}s  ({t['startup_mean_s']}s)")


if __name__ == "__main__":
    main()

"""What sampling resource use costs (goal: at most 1 % of a task's CPU).

1. One sampling round (node/usage.Sampler: one pass over /proc, then each task's tree) on
   this machine as it is, for 1, 8 and 64 tasks: its CPU time, and that as a share of one
   core at the default interval (5 s).
2. Real local jobs, alternating without sampling (TFDIST_USAGE_INTERVAL=0) and with it
   (the default 5 s, and 0.5 s to magnify it): each task does a fixed amount of work and
   prints its own CPU time; tfdist's CPU is all the CPU the run used (getrusage of the
   waited children) minus the tasks' own. Reported: the medians, and tfdist's extra CPU
   with sampling as a share of the tasks' CPU.

    python benchmarks/usage_cost.py [--runs 5] [--tasks 2] [--work 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

TASK = """
import sys, time
end = time.process_time() + float(sys.argv[1])
while time.process_time() < end:
    sum(range(1000))
print("TASK_CPU", time.process_time(), flush=True)
"""


def rounds(tasks: int, n: int = 50) -> float:
    """CPU seconds of one sampling round of ``tasks`` trees (this process's children)."""
    from tfdist.node.usage import Sampler

    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(tasks)]
    try:
        sampler = Sampler()
        watched = {f"t{i}": (p.pid, None) for i, p in enumerate(procs)}
        sampler.sample(watched)
        start = time.thread_time()
        for _ in range(n):
            sampler.sample(watched)
        return (time.thread_time() - start) / n
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run_job(tmp: Path, tasks: int, work: float, interval: str) -> tuple[float, float, float]:
    """(tasks' CPU, tfdist's own CPU, wall) of one local run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "tfdist.cli", "run", "-q", "--runs-dir", str(tmp / "runs"), "--workers",
         str(tasks), "--name", "cost", "--", sys.executable, str(tmp / "task.py"), str(work)],
        capture_output=True, text=True, env=dict(os.environ, TFDIST_USAGE_INTERVAL=interval,
                                                 PYTHONPATH=str(ROOT / "src")), cwd=tmp)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr
    logs = sorted((tmp / "runs").glob("cost-*"))[-1] / "logs"
    task_cpu = sum(float(line.split()[-1]) for f in logs.glob("worker-*.log")
                   for line in f.read_text().splitlines() if line.startswith("TASK_CPU"))
    total = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return task_cpu, total - task_cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--work", type=float, default=4.0, help="CPU seconds of each task")
    args = parser.parse_args()
    from tfdist.node.usage import INTERVAL

    print(f"load average {os.getloadavg()[0]:.1f}; {len(os.listdir('/proc'))} entries in /proc")
    print("\none sampling round (one pass over /proc, then each task's tree):")
    for n in (1, 8, 64):
        cost = rounds(n)
        print(f"  {n:>2} tasks: {cost * 1000:.2f} ms CPU a round = {cost / INTERVAL:.4%} of a core at "
              f"{INTERVAL:g} s; per task {cost / n / INTERVAL:.4%} of a core")
    os.environ["TFDIST_HOME"] = tempfile.mkdtemp(prefix="tfdist-bench-usage-")
    tmp = Path(tempfile.mkdtemp(prefix="tfdist-bench-usage-run-"))
    (tmp / "task.py").write_text(TASK)
    results: dict[str, list[tuple[float, float, float]]] = {}
    for _ in range(args.runs):
        for interval in ("0", "5", "0.5"):
            results.setdefault(interval, []).append(run_job(tmp, args.tasks, args.work, interval))
    print(f"\nlocal runs of {args.tasks} tasks x {args.work:g} CPU s, alternating (median of {args.runs}):")
    base = statistics.median(r[1] for r in results["0"])
    for interval, rows in results.items():
        task_cpu = statistics.median(r[0] for r in rows)
        own = statistics.median(r[1] for r in rows)
        wall = statistics.median(r[2] for r in rows)
        label = "off" if interval == "0" else f"every {interval} s"
        extra = "" if interval == "0" else f"; extra {own - base:+.3f} s = {(own - base) / task_cpu:+.2%} of the tasks' CPU"
        print(f"  sampling {label:<12} tasks {task_cpu:.2f} s CPU, tfdist {own:.3f} s CPU, wall {wall:.2f} s{extra}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

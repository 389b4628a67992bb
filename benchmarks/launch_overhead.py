"""Launch overhead, exit-notice latency and the supervisor's footprint.

1. ``tfdist run -q --workers 4 -- true``: the launcher's own cost (imports, validation,
   planning, four no-op processes, the summary), median of N alternating with a shell that
   starts the same four; with ``--baseline-src DIR`` also alternating with the ``tfdist``
   sources in DIR (e.g. a checkout of an older commit's ``src``). Goal: median <= 0.15 s.
2. ``tfdist run`` of 4 tasks that import tensorflow and exit, against the same 4 started by
   a plain shell script; median of N alternating runs. Goal: overhead < 0.3 s, ratio < 1.10.
3. Exit notice: a task prints its wall-clock time as its last act; the supervisor's
   recorded exit time minus that is how long tfdist took to notice. Goal: < 100 ms.
4. The supervisor's resident memory (goal < 80 MB: it never imports TensorFlow) and CPU use
   while 4 tasks run for a few seconds (goal < 2% of a core).

    python benchmarks/launch_overhead.py [--runs 5] [--noop-runs 12] [--baseline-src DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

PY = sys.executable
TFDIST = [PY, "-m", "tfdist.cli"]
TASK = "import tensorflow"


def timed(cmd: list[str], **kw) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - start


def launch_overhead(runs: int, tmp: Path) -> dict:
    # The shell gets the environment tfdist gives its tasks, so only launching differs:
    # TF_USE_LEGACY_KERAS=1 skips importing Keras 3 and an empty CUDA_VISIBLE_DEVICES skips
    # CUDA probing, both of which change the cost of `import tensorflow` by seconds.
    env = "TF_USE_LEGACY_KERAS=1 CUDA_VISIBLE_DEVICES= PYTHONUNBUFFERED=1"
    shell = f"for i in 1 2 3 4; do env {env} {PY} -c '{TASK}' & done; wait"
    plain, ours = [], []
    for _ in range(runs):  # alternate so drift in machine load hits both alike
        plain.append(timed(["bash", "-c", shell]))
        ours.append(timed([*TFDIST, "run", "-q", "--runs-dir", str(tmp), "--workers", "4", "--", PY, "-c", TASK]))
    p, o = statistics.median(plain), statistics.median(ours)
    return {"runs": runs, "shell_median_s": round(p, 3), "tfdist_median_s": round(o, 3),
            "overhead_s": round(o - p, 3), "ratio": round(o / p, 3)}


def noop_launch(runs: int, tmp: Path, baseline_src: str | None) -> dict:
    """``tfdist run -q --workers 4 -- true`` against a shell starting the same four."""
    script = Path(sys.executable).with_name("tfdist")  # what users type, not python -m
    cli = [str(script)] if script.exists() else TFDIST
    ours_cmd = [*cli, "run", "-q", "--runs-dir", str(tmp), "--workers", "4", "--", "true"]
    shell_cmd = ["bash", "-c", "true & true & true & true & wait"]
    env = dict(os.environ)
    base_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [baseline_src, env.get("PYTHONPATH")]))}
    ours, shell, base = [], [], []
    for _ in range(runs):  # alternate so drift in machine load hits all alike
        shell.append(timed(shell_cmd))
        ours.append(timed(ours_cmd))
        if baseline_src:
            base.append(timed(ours_cmd, env=base_env))
    out = {"runs": runs, "tfdist_median_s": round(statistics.median(ours), 3),
           "shell_median_s": round(statistics.median(shell), 3)}
    if base:
        out["baseline_median_s"] = round(statistics.median(base), 3)
    return out


def exit_notice(tmp: Path, runs: int) -> dict:
    code = "import time; print('EXIT_AT', repr(time.time()), flush=True)"
    lags = []
    for i in range(runs):
        run_root = tmp / f"notice-{i}"
        subprocess.run([*TFDIST, "run", "-q", "--runs-dir", str(run_root), "--workers", "2", "--", PY, "-c", code],
                       check=True, stdout=subprocess.DEVNULL)
        run_dir = next(run_root.iterdir())
        for log in (run_dir / "logs").glob("*.log"):
            printed = float(next(ln for ln in log.read_text().splitlines() if ln.startswith("EXIT_AT")).split()[1])
            events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
            noticed = next(e["time"] for e in events if e["task"] == log.stem and e["state"] == "succeeded")
            lags.append(noticed - printed)
    return {"samples": len(lags), "median_ms": round(1000 * statistics.median(lags), 1),
            "max_ms": round(1000 * max(lags), 1)}


def footprint(tmp: Path, seconds: float = 8.0) -> dict:
    proc = psutil.Popen([*TFDIST, "run", "-q", "--runs-dir", str(tmp / "fp"), "--workers", "4", "--",
                         PY, "-c", f"import time\nfor i in range(int({seconds}*10)):\n print(i, flush=True); time.sleep(0.1)"],
                        stdout=subprocess.DEVNULL)
    time.sleep(1.0)  # past start-up
    cpu0 = proc.cpu_times()
    t0 = time.perf_counter()
    rss = 0
    while proc.poll() is None and time.perf_counter() - t0 < seconds - 2:
        rss = max(rss, proc.memory_info().rss)
        time.sleep(0.2)
    cpu1 = proc.cpu_times()
    elapsed = time.perf_counter() - t0
    proc.wait()
    used = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {"max_rss_mb": round(rss / 2**20, 1), "cpu_percent_of_core": round(100 * used / elapsed, 2),
            "note": "4 tasks printing 10 lines/s each"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--noop-runs", type=int, default=12)
    parser.add_argument("--baseline-src", help="another tfdist src tree to alternate the no-op launch with")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        result = {
            "noop": noop_launch(args.noop_runs, tmp / "noop", args.baseline_src),
            "launch": launch_overhead(args.runs, tmp / "launch"),
            "exit_notice": exit_notice(tmp, 3),
            "supervisor": footprint(tmp),
            "cpus": os.cpu_count(),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    la, ex, sv, no = result["launch"], result["exit_notice"], result["supervisor"], result["noop"]
    base = f", baseline sources {no['baseline_median_s']} s" if "baseline_median_s" in no else ""
    print(f"tfdist run -q --workers 4 -- true (median of {no['runs']}): {no['tfdist_median_s']} s "
          f"(a shell starting the same: {no['shell_median_s']} s{base})")
    print(f"launch (4 tasks importing tensorflow, median of {la['runs']}): shell {la['shell_median_s']} s, "
          f"tfdist {la['tfdist_median_s']} s, overhead {la['overhead_s']} s, ratio {la['ratio']}")
    print(f"exit noticed after: median {ex['median_ms']} ms, max {ex['max_ms']} ms ({ex['samples']} exits)")
    print(f"supervisor: max RSS {sv['max_rss_mb']} MB, CPU {sv['cpu_percent_of_core']}% of one core")


if __name__ == "__main__":
    main()

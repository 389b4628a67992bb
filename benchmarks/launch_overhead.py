"""Launch overhead, exit-notice latency and the supervisor's footprint.

1. ``tfdist run -q --workers 4 -- true``: the launcher's own cost (imports, validation,
   planning, four no-op processes, the summary), median of N alternating with a shell that
   starts the same four, and with the same launch under PYTHONDONTWRITEBYTECODE=1, over the
   byte-compiled tree and over sources without bytecode; with ``--baseline-src DIR`` also
   alternating with the ``tfdist`` sources in DIR (e.g. a checkout of an older commit's
   ``src``). Goal: median <= 0.15 s in every environment.
2. Where tfdist's own time goes, read from the tasks' clocks: the command to the first task
   running, the last task's end to tfdist's exit.
3. ``tfdist run`` of 4 tasks that import tensorflow and exit, against the same 4 started by
   a plain shell script; N alternating pairs, the median of their differences. Goal (issue
   12): overhead <= 0.10 s.
4. Exit notice: a task prints its wall-clock time as its last act; the supervisor's
   recorded exit time minus that is how long tfdist took to notice (tasks that exit at
   once, and tasks that exit 0.5 s in). Goal: < 100 ms.
5. The supervisor's resident memory (goal < 80 MB: it never imports TensorFlow) and CPU use
   while 4 tasks run for a few seconds (goal < 2% of a core).

    python benchmarks/launch_overhead.py [--runs 5] [--noop-runs 12] [--baseline-src DIR] [--noop-only] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def timed_cpu(cmd: list[str], **kw) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system of the command and everything it waited
    for: tfdist, its guardian, the tasks). CPU time hardly moves with the machine's load,
    wall time does: on shared cores the CPU figure is the one to compare."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = timed(cmd, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tfdist_cli() -> list[str]:
    """The ``tfdist`` script users type (its exit differs from ``python -m``'s), else -m."""
    script = Path(sys.executable).with_name("tfdist")
    return [str(script)] if script.exists() else TFDIST


def launch_overhead(runs: int, tmp: Path) -> dict:
    """tfdist vs a shell, both starting 4 TF-importing tasks; pairs alternate which goes
    first. The figure is the median of the per-pair differences: the machine's drift between
    pairs cancels, and the median of a difference is steadier than a difference of medians."""
    # The shell gets the environment tfdist gives its tasks, so only launching differs:
    # TF_USE_LEGACY_KERAS=1 skips importing Keras 3 and an empty CUDA_VISIBLE_DEVICES skips
    # CUDA probing, both of which change the cost of `import tensorflow` by seconds.
    env = "TF_USE_LEGACY_KERAS=1 CUDA_VISIBLE_DEVICES= PYTHONUNBUFFERED=1"
    shell = f"for i in 1 2 3 4; do env {env} {PY} -c '{TASK}' & done; wait"
    ours_cmd = [*tfdist_cli(), "run", "-q", "--runs-dir", str(tmp), "--workers", "4", "--", PY, "-c", TASK]
    plain, ours = [], []
    for i in range(runs):
        if i % 2:
            ours.append(timed(ours_cmd))
            plain.append(timed(["bash", "-c", shell]))
        else:
            plain.append(timed(["bash", "-c", shell]))
            ours.append(timed(ours_cmd))
    p, o = statistics.median(plain), statistics.median(ours)
    diffs = sorted(b - a for a, b in zip(plain, ours, strict=True))
    quart = statistics.quantiles(diffs, n=4) if len(diffs) >= 2 else [diffs[0]] * 3
    return {"runs": runs, "shell_median_s": round(p, 3), "tfdist_median_s": round(o, 3),
            "overhead_s": round(statistics.median(diffs), 3),
            "overhead_quartiles_s": [round(quart[0], 3), round(quart[2], 3)],
            "ratio": round(o / p, 3), "differences_s": [round(d, 3) for d in diffs]}


def timeline(runs: int, tmp: Path) -> dict:
    """tfdist's own time at both ends of a job, from the tasks' clocks: the command to the
    first task running, and the last task's last act to tfdist's exit (4 tasks that print
    the wall-clock time, sleep 0.3 s and print it again)."""
    stamp = "import time; print(repr(time.time()), flush=True)"
    task = f"{stamp}; time.sleep(0.3); {stamp}"
    to_first, after_last = [], []
    for i in range(runs):
        root = tmp / f"timeline-{i}"
        begin = time.time()
        subprocess.run([*tfdist_cli(), "run", "-q", "--runs-dir", str(root), "--workers", "4", "--",
                        "python3", "-S", "-c", task], check=True, stdout=subprocess.DEVNULL)
        end = time.time()
        starts, ends = [], []
        for log in next(root.iterdir()).joinpath("logs").glob("*.log"):
            stamps = [float(ln) for ln in log.read_text().splitlines() if ln[:1].isdigit()]
            starts.append(stamps[0])
            ends.append(stamps[-1])
        to_first.append(min(starts) - begin)
        after_last.append(end - max(ends))
    return {"runs": runs, "to_first_task_ms": round(1000 * statistics.median(to_first), 1),
            "after_last_task_ms": round(1000 * statistics.median(after_last), 1),
            "note": "each task's first stamp includes starting python3 -S (~10 ms)"}


def noop_launch(runs: int, tmp: Path, baseline_src: str | None) -> dict:
    """``tfdist run -q --workers 4 -- true`` against a shell starting the same four, in the
    three environments a launch meets: Python free to write bytecode, PYTHONDONTWRITEBYTECODE=1
    over the byte-compiled tree (``make setup`` compiles it: Python still reads .pyc files, it
    only stops writing them), and PYTHONDONTWRITEBYTECODE=1 over a copy of the sources with no
    .pyc at all (an editable install before ``make setup`` compiled it: every module compiled
    from source on every launch)."""
    import shutil

    import tfdist

    ours_cmd = [*tfdist_cli(), "run", "-q", "--runs-dir", str(tmp), "--workers", "4", "--", "true"]
    shell_cmd = ["bash", "-c", "true & true & true & true & wait"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    no_write = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
    bare = tmp.parent / "src-without-bytecode"
    shutil.copytree(Path(tfdist.__file__).parent, bare / "tfdist", ignore=shutil.ignore_patterns("__pycache__"))
    bare_env = {**no_write, "PYTHONPATH": os.pathsep.join(filter(None, [str(bare), env.get("PYTHONPATH")]))}
    base_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [baseline_src, env.get("PYTHONPATH")]))}
    # older sources may lack the script's entry point: they run as the script of their day did
    base_cmd = [PY, "-c", "import sys; from tfdist.cli.main import main; sys.exit(main())", *ours_cmd[1:]]
    ours, ours_no_write, ours_bare, shell, base = [], [], [], [], []
    cpu: dict[str, list[float]] = {"tfdist": [], "dont_write_bytecode": [], "no_bytecode": []}
    for _ in range(runs):  # alternate so drift in machine load hits all alike
        shell.append(timed(shell_cmd, env=env))
        for walls, key, run_env in ((ours, "tfdist", env), (ours_no_write, "dont_write_bytecode", no_write),
                                    (ours_bare, "no_bytecode", bare_env)):
            wall, used = timed_cpu(ours_cmd, env=run_env)
            walls.append(wall)
            cpu[key].append(used)
        if baseline_src:
            base.append(timed(base_cmd, env=base_env))
    leftover = sorted(str(p) for p in bare.rglob("*.pyc"))
    assert not leftover, f"PYTHONDONTWRITEBYTECODE=1 but bytecode was written: {leftover[:3]}"
    out = {"runs": runs, "tfdist_median_s": round(statistics.median(ours), 3),
           "tfdist_dont_write_bytecode_median_s": round(statistics.median(ours_no_write), 3),
           "tfdist_no_bytecode_median_s": round(statistics.median(ours_bare), 3),
           "shell_median_s": round(statistics.median(shell), 3),
           "cpu_median_s": {k: round(statistics.median(v), 3) for k, v in cpu.items()}}
    if base:
        out["baseline_median_s"] = round(statistics.median(base), 3)
    return out


def exit_notice(tmp: Path, runs: int, delay: float = 0.0) -> dict:
    """``delay``: seconds the task sleeps first. At 0 the exit comes while tfdist is still
    doing what it defers until the tasks are started (job.yaml, the job store), so it is
    noticed after that work; later exits show the steady state."""
    code = f"import time; time.sleep({delay}); print('EXIT_AT', repr(time.time()), flush=True)"
    lags = []
    for i in range(runs):
        run_root = tmp / f"notice-{delay}-{i}"
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


def compiled(*extra: str | None) -> None:
    """Byte-compile tfdist (and ``--baseline-src``) first, as ``pip install`` and ``make
    setup`` do (timestamp invalidation, as there), so the figures are those of an installed
    tree; the no-op launch also measures sources without bytecode on purpose."""
    import tfdist

    for tree in [str(Path(tfdist.__file__).parent), *[str(Path(e) / "tfdist") for e in extra if e]]:
        subprocess.run([PY, "-m", "compileall", "-q", "--invalidation-mode", "timestamp", tree],
                       check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--noop-runs", type=int, default=12)
    parser.add_argument("--baseline-src", help="another tfdist src tree to alternate the no-op launch with")
    parser.add_argument("--noop-only", action="store_true", help="only the no-op launch (no TensorFlow)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compiled(args.baseline_src)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.noop_only:
            no = noop_launch(args.noop_runs, tmp / "noop", args.baseline_src)
            print(json.dumps(no, indent=2) if args.json else
                  f"tfdist run -q --workers 4 -- true (median of {no['runs']}): {no['tfdist_median_s']} s; "
                  f"PYTHONDONTWRITEBYTECODE=1: {no['tfdist_dont_write_bytecode_median_s']} s byte-compiled, "
                  f"{no['tfdist_no_bytecode_median_s']} s without bytecode; a shell: {no['shell_median_s']} s; "
                  f"CPU: {no['cpu_median_s']}")
            return
        result = {
            "noop": noop_launch(args.noop_runs, tmp / "noop", args.baseline_src),
            "timeline": timeline(args.noop_runs, tmp / "timeline"),
            "launch": launch_overhead(args.runs, tmp / "launch"),
            "exit_notice": exit_notice(tmp, 3),
            "exit_notice_later": exit_notice(tmp, 3, delay=0.5),
            "supervisor": footprint(tmp),
            "cpus": os.cpu_count(),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    la, ex, sv, no = result["launch"], result["exit_notice"], result["supervisor"], result["noop"]
    tl = result["timeline"]
    base = f", baseline sources {no['baseline_median_s']} s" if "baseline_median_s" in no else ""
    print(f"tfdist run -q --workers 4 -- true (median of {no['runs']}): {no['tfdist_median_s']} s "
          f"(a shell starting the same: {no['shell_median_s']} s{base})")
    print(f"  with PYTHONDONTWRITEBYTECODE=1: {no['tfdist_dont_write_bytecode_median_s']} s over the "
          f"byte-compiled tree (make setup), {no['tfdist_no_bytecode_median_s']} s over sources without bytecode")
    print(f"first task running {tl['to_first_task_ms']} ms after the command; tfdist gone "
          f"{tl['after_last_task_ms']} ms after the last task (median of {tl['runs']})")
    lo, hi = la["overhead_quartiles_s"]
    print(f"launch (4 tasks importing tensorflow, {la['runs']} alternating pairs): shell median "
          f"{la['shell_median_s']} s, tfdist {la['tfdist_median_s']} s; overhead (median of the pairs' "
          f"differences) {la['overhead_s']} s, quartiles {lo} to {hi} s; ratio {la['ratio']}")
    later = result["exit_notice_later"]
    print(f"exit noticed after: median {ex['median_ms']} ms, max {ex['max_ms']} ms ({ex['samples']} exits "
          f"at once); median {later['median_ms']} ms, max {later['max_ms']} ms (exits 0.5 s in)")
    print(f"supervisor: max RSS {sv['max_rss_mb']} MB, CPU {sv['cpu_percent_of_core']}% of one core")


if __name__ == "__main__":
    main()

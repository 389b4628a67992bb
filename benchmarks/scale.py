"""Scale of the local backend: N tasks that sleep, for N = 100, 500, 1000.

For each N, one ``tfdist run --workers N --strategy none -- sh sleeper.sh S`` (a shell, as the
issue measured: N Python start-ups would load the 2 cores more than tfdist does) and:

- start: seconds from launching tfdist until the last task reported running (events.jsonl);
- end: seconds from the last task's exit (it prints its wall clock as its last act) until
  the job's summary says it ended;
- notice: median and max seconds from a task's last print to its recorded exit;
- the supervisor's peak RSS, and its CPU use while every task runs (percent of one core);
- the size of one task's TF_CONFIG (it grows with N: every task gets the whole cluster).

With ``--restart``, one more run per N under multi_worker_mirrored (no TensorFlow: the tasks
only sleep) in which worker-7 exits 1 after a second: the whole group restarts, and the
figure is the time from that exit until every task's next attempt is running.

Goals (issue 16): at 1,000 tasks, all running within 2 s, end within 1 s of the last exit,
exits noticed within 100 ms, RSS < 150 MB, CPU < 5 % of a core while they run; a group
restart of 1,000 tasks in < 3 s.

    python benchmarks/scale.py [--tasks 100 500 1000] [--sleep 3] [--restart] [--json]

With ``--backend kubernetes``: N supervised pods on kwok's fake nodes of the real control
plane (``make kube-up``); the figures are described in benchmarks/scale_k8s.py. Goals
(issue 16): all 1,000 pods created within 10 s, exits noticed within 1 s, everything
deleted at the end.

    python benchmarks/scale.py --backend kubernetes [--tasks 200 500 1000] [--sleep 20] [--bare]

``--bare`` adds, per N, the same pods created straight from the benchmark (no supervisor)
with their full TF_CONFIG and with it cut to ``{}``: what the pods' size costs.
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

import psutil

PY = sys.executable
TFDIST = [PY, "-m", "tfdist.cli"]
SLEEPER = """if [ "$TFDIST_TASK" = worker-7 ] && [ "$TFDIST_RESTART_COUNT" = 0 ] && [ -n "$2" ]; then
    sleep 1; exit 1
fi
sleep "$1"
echo EXIT_AT "$(date +%s.%N)" "${#TF_CONFIG}"
"""


def one(n: int, sleep: float, tmp: Path) -> dict:
    script = tmp / "sleeper.sh"
    script.write_text(SLEEPER)
    runs = tmp / f"runs-{n}"
    t0 = time.time()
    out_file = (tmp / f"summary-{n}.json").open("w+")  # a file: a 1,000-task summary outgrows a pipe
    proc = psutil.Popen([*TFDIST, "run", "-q", "--json", "--runs-dir", str(runs), "--workers", str(n),
                         "--strategy", "none", "--name", f"scale{n}", "--", "sh", str(script), str(sleep)],
                        stdout=out_file, stderr=subprocess.PIPE, text=True)
    rss, cpu_window = 0, None
    while proc.poll() is None:
        try:
            rss = max(rss, proc.memory_info().rss)
            now = time.time()
            if cpu_window is None and now - t0 > 0.6 * sleep + 1:  # every task started by now
                cpu_window = (now, proc.cpu_times())
            elif cpu_window is not None and len(cpu_window) == 2 and now - cpu_window[0] > sleep * 0.3:
                c0, c1 = cpu_window[1], proc.cpu_times()
                cpu_window = (*cpu_window, 100 * ((c1.user + c1.system) - (c0.user + c0.system)) / (now - cpu_window[0]))
        except psutil.Error:
            break
        time.sleep(0.05)
    _, err = proc.communicate()
    out_file.seek(0)
    out = out_file.read()
    out_file.close()
    if proc.returncode != 0:
        raise SystemExit(f"{n} tasks: tfdist exited {proc.returncode}: {err.strip()[-500:]}")
    summary = json.loads(out)
    run_dir = Path(summary["run_dir"])
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    running = [e["time"] for e in events if e["state"] == "running"]
    exits = {e["task"]: e["time"] for e in events if e["state"] == "succeeded"}
    printed, tf_config = {}, 0
    for log in (run_dir / "logs").glob("*.log"):
        line = next(ln for ln in log.read_text().splitlines() if ln.startswith("EXIT_AT"))
        printed[log.stem] = float(line.split()[1])
        tf_config = int(line.split()[2])
    lags = [exits[t] - printed[t] for t in printed if t in exits]
    return {
        "tasks": n,
        "all_running_s": round(max(running) - t0, 2),
        "end_after_last_exit_s": round(summary["ended_at"] - max(printed.values()), 3),
        "notice_median_ms": round(1000 * statistics.median(lags), 1),
        "notice_max_ms": round(1000 * max(lags), 1),
        "max_rss_mb": round(rss / 2**20, 1),
        "cpu_percent_while_running": round(cpu_window[2], 1) if cpu_window and len(cpu_window) == 3 else None,
        "tf_config_bytes": tf_config,
        "wall_s": round(summary["ended_at"] - t0, 2),
    }


def restart(n: int, sleep: float, tmp: Path) -> dict:
    """worker-7 fails once; seconds from its exit until all N next attempts run."""
    script = tmp / "sleeper.sh"
    script.write_text(SLEEPER)
    job = tmp / f"restart-{n}.yaml"
    # the others outlast the start of all N (else worker-0 succeeds first and the job is over)
    last = sleep + 3 + n / 100
    job.write_text(f"name: restart{n}\nstrategy: multi_worker_mirrored\n"
                   f"command: [sh, {script}, '{last}', fail]\nroles: {{worker: {n}}}\n"
                   "restart: {policy: on-failure, max_restarts: 1, backoff_seconds: 0}\n")
    proc = subprocess.run([*TFDIST, "run", "-q", "--json", "--runs-dir", str(tmp / f"rr-{n}"), str(job)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"restart run with {n} tasks: tfdist exited {proc.returncode}: {proc.stderr[-500:]}")
    run_dir = Path(json.loads(proc.stdout)["run_dir"])
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    failed = next(e["time"] for e in events if e["task"] == "worker-7" and e["state"] == "failed")
    rerun = [e["time"] for e in events if e["state"] == "running" and e["attempt"] == 1]
    return {"tasks": n, "restarted": len(rerun), "group_restart_s": round(max(rerun) - failed, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--sleep", type=float, default=3.0)
    parser.add_argument("--restart", action="store_true", help="also time a group restart")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--backend", choices=["local", "kubernetes"], default="local")
    parser.add_argument("--bare", action="store_true", help="kubernetes: also create the pods without tfdist")
    args = parser.parse_args()
    if args.backend == "kubernetes":
        kube_main(args)
        return
    results = []
    with tempfile.TemporaryDirectory() as d:
        for n in args.tasks:
            results.append(one(n, args.sleep, Path(d)))
            if not args.json:
                r = results[-1]
                print(f"{n:5d} tasks: all running {r['all_running_s']} s, end {r['end_after_last_exit_s']} s after "
                      f"the last exit, exit noticed median {r['notice_median_ms']} ms (max {r['notice_max_ms']}), "
                      f"RSS {r['max_rss_mb']} MB, CPU {r['cpu_percent_while_running']}% of a core, "
                      f"TF_CONFIG {r['tf_config_bytes']} B, wall {r['wall_s']} s", flush=True)
            if args.restart:
                results.append(restart(n, args.sleep, Path(d)))
                if not args.json:
                    r = results[-1]
                    print(f"{n:5d} tasks: group restart after one failure: all {r['restarted']} running again "
                          f"{r['group_restart_s']} s after it", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))


def kube_main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.scale_k8s import bare_creates, kube_one, print_row

    results = []
    with tempfile.TemporaryDirectory() as d:
        for n in args.tasks:
            results.append(kube_one(n, args.sleep, Path(d)))
            if not args.json:
                print_row(results[-1])
            for stub in [False, True] if args.bare else []:
                results.append(bare_creates(n, stub))
                if not args.json:
                    r = results[-1]
                    print(f"{n:5d} pods without tfdist, TF_CONFIG {r['tf_config']} ({r['pod_bytes']} B a pod): "
                          f"all created {r['created_s']} s, all running {r['all_running_s']} s", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""Recovery time after a task is SIGKILLed: task death -> first training step after resume.

Scenarios (issue: fault tolerance): MultiWorkerMirrored with 3 workers (the whole group
restarts), and ParameterServer with a chief, 2 workers and 1 ps (a worker restarts alone;
a ps or the chief restarts ps + chief). Training is benchmarks/recovery_task.py, which
prints ``STEP <time>`` on every task at every step and checkpoints every few calls.

"Start-up" is the same measure for a fresh start (task started -> its first step): the
part of recovery that is TensorFlow's own start-up, not tfdist's. Recovery minus start-up
is what tfdist adds (noticing, stopping the group, restarting).

With ``--spares both`` (the default) every scenario runs with warm spares off and on
(``restart.warm_spares``), alternating, so both see the same machine; with spares on the
kill waits until every task's spare is ready (``tfdist: warm spare for ... ready``), and the
idle spares' memory is read from /proc (RSS, PSS, and private: what a spare alone costs).
A run is stopped (SIGINT) once training resumed: only the recovery is measured.

``--backend spark`` runs the same scenarios on a Spark standalone cluster (a master and two
workers of 2 cores on 127.0.0.1, started for the benchmark from the pyspark installation, or
the one ``--spark-master``/``--spark-ui`` name), where each task's agent holds its spare.
``--backend yarn`` runs them on the YARN cluster ``HADOOP_CONF_DIR`` names (``make yarn-up``:
two NodeManagers on 127.0.0.1), a container per task whose agent holds its spare;
``--backend ray`` on a Ray cluster of two nodes on 127.0.0.1 started for the benchmark,
where each task's actor holds it. On every backend the tasks are processes of this machine,
so the kill and the spares' memory are read here.

    python benchmarks/recovery.py [--runs 2] [--spares both|on|off] [--backend local|spark|yarn|ray] [--json]
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
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TFDIST = [sys.executable, "-m", "tfdist.cli"]
# name: (tfdist arguments, role to kill). Jobs train "forever" and are stopped once training
# resumed after the kill.
SCENARIOS = {
    "mwms-3w/worker": (["--workers", "3", "--strategy", "multi_worker_mirrored"], "worker"),
    "pss-2w1ps/worker": (["--chief", "--workers", "2", "--ps", "1"], "worker"),
    "pss-2w1ps/ps": (["--chief", "--workers", "2", "--ps", "1"], "ps"),
    "pss-2w1ps/chief": (["--chief", "--workers", "2", "--ps", "1"], "chief"),
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


def memory(pid: int) -> dict[str, float]:
    """RSS, PSS and private (USS) memory of a process in MB, from /proc/PID/smaps_rollup."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                out[key] = int(rest.split()[0]) / 1024
    return {"rss_mb": round(out.get("Rss", 0), 1), "pss_mb": round(out.get("Pss", 0), 1),
            "private_mb": round(out.get("Private_Clean", 0) + out.get("Private_Dirty", 0), 1)}


def spares_ready(logs: Path) -> dict[str, int]:
    """Task -> pid of each spare its log says is ready (the last one)."""
    ready: dict[str, int] = {}
    for log in logs.glob("*.log") if logs.exists() else []:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("tfdist: warm spare for ") and " ready (pid " in line:
                ready[log.stem] = int(line.rsplit("(pid ", 1)[1].rstrip(")"))
    return ready


def resumed_at(run_dir: Path, role: str, victim: str) -> float | None:
    """When training ran again after the kill (see the module's docstring), or None yet."""
    logs = run_dir / "logs"
    if role == "worker":
        return min(steps(logs / f"{victim}.log", attempt=1), default=None)
    events = jsonl(run_dir / "events.jsonl")
    restarted = [e["time"] for e in events if e["task"] == victim and e["attempt"] == 1
                 and e["state"] == "running"]
    if not restarted:
        return None
    return min((t for w in logs.glob("worker-*.log") for t in steps(w) if t > restarted[0]), default=None)


def one_run(args_: list[str], role: str, warm: bool, rng: random.Random, tmp: Path,
            backend: list[str]) -> dict:
    runs = tmp / "runs"
    spares = ", warm_spares: true" if warm else ""
    cmd = [*TFDIST, "run", "-q", "--json", "--runs-dir", str(runs), *backend, *args_,
           "--set", f"restart={{policy: on-failure, max_restarts: 2, backoff_seconds: 0{spares}}}",
           "--", "python", str(ROOT / "benchmarks" / "recovery_task.py"), "--calls", "1000000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp)
    victim = f"{role}-{rng.randrange(2) if role == 'worker' else 0}"
    killed = resumed = None
    spare_memory: list[dict[str, float]] = []
    tasks = 4 if "--ps" in args_ else 3
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        dirs = list(runs.glob("*")) if runs.exists() else []
        if dirs and killed is None:
            progress = jsonl(dirs[0] / "progress.jsonl")
            ready = spares_ready(dirs[0] / "logs") if warm else {}
            if any(p.get("step", 0) >= 50 for p in progress) and (not warm or len(ready) >= tasks):
                spare_memory = [memory(pid) for pid in ready.values()]
                time.sleep(rng.uniform(0, 1))
                pid = [e["pid"] for e in jsonl(dirs[0] / "events.jsonl") if e["task"] == victim and e.get("pid")][-1]
                os.kill(pid, signal.SIGKILL)
                killed = time.time()
        elif dirs and resumed is None:
            resumed = resumed_at(dirs[0], role, victim)
            if resumed is not None:
                proc.send_signal(signal.SIGINT)  # measured: the rest of training is not needed
        time.sleep(0.05)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    result = json.loads(proc.communicate()[0])
    run_dir = Path(result["run_dir"])
    logs = run_dir / "logs"
    events = jsonl(run_dir / "events.jsonl")
    resumed = resumed or resumed_at(run_dir, role, victim)
    first_start = min(e["time"] for e in events if e["state"] == "running")
    first_step = min(t for w in logs.glob("worker-*.log") for t in steps(w))
    cold = "no warm spare for" in "".join(p.read_text(errors="replace") for p in logs.glob("*.log"))
    return {"warm": warm, "victim": victim, "restarts": result["restarts_used"], "cold_fallback": cold,
            "recovery_s": None if resumed is None or killed is None else round(resumed - killed, 2),
            "startup_s": round(first_step - first_start, 2), "spare_memory": spare_memory}


def summarize(rows: list[dict]) -> dict:
    rec = [r["recovery_s"] for r in rows if r["recovery_s"] is not None]
    mem = [m for r in rows for m in r["spare_memory"]]
    return {
        "runs": len(rows), "recovered": len(rec), "recovery_s": rec,
        "recovery_mean_s": round(statistics.mean(rec), 2) if rec else None,
        "recovery_worst_s": max(rec) if rec else None,
        "startup_mean_s": round(statistics.mean(r["startup_s"] for r in rows), 2),
        "cold_fallbacks": sum(r["cold_fallback"] for r in rows),
        "spare_mb": {k: round(statistics.mean(m[k] for m in mem), 1) for k in mem[0]} if mem else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="runs per scenario and mode")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--spares", choices=["both", "on", "off"], default="both")
    parser.add_argument("--spares-first", action="store_true", help="with both: start each pair with spares on")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), help="run only these")
    parser.add_argument("--backend", choices=["local", "spark", "yarn", "ray"], default="local")
    parser.add_argument("--spark-master", help="with --backend spark: a running master (else one is started)")
    parser.add_argument("--spark-ui", help="its web UI (http://HOST:PORT)")
    args = parser.parse_args()
    with backend_args(args.backend, args.spark_master, args.spark_ui) as backend:
        table = measure(args, backend)
    report(table, args.json)


@contextlib.contextmanager
def backend_args(backend: str, master: str | None, ui: str | None) -> Iterator[list[str]]:
    """The tfdist arguments that run on ``backend``; a Spark or Ray cluster is started for the
    benchmark (Spark's only if none is named); YARN's must be running (``HADOOP_CONF_DIR``)."""
    if backend == "local":
        yield []
    elif backend == "yarn":
        if not os.environ.get("HADOOP_CONF_DIR"):
            sys.exit("--backend yarn: set HADOOP_CONF_DIR to a running cluster's (make yarn-up: .yarn/conf)")
        yield ["--backend", "yarn"]
    elif backend == "ray":
        from ray.cluster_utils import Cluster

        ray_cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
        try:
            ray_cluster.add_node(num_cpus=2)
            ray_cluster.wait_for_nodes()
            yield ["--backend", "ray", "--ray-address", ray_cluster.address]
        finally:
            ray_cluster.shutdown()
    elif master:
        yield ["--backend", "spark", "--spark-master", master, *(["--set", f"spark.master_ui={ui}"] if ui else [])]
    else:
        sys.path.insert(0, str(ROOT))
        from tests.backends.spark.spark_cluster import StandaloneCluster

        cluster = StandaloneCluster(workers=2, cores=2).start()
        try:
            yield ["--backend", "spark", "--spark-master", cluster.master, "--set", f"spark.master_ui={cluster.ui}"]
        finally:
            cluster.stop()


def measure(args: argparse.Namespace, backend: list[str]) -> dict[str, dict]:
    rng = random.Random(args.seed)
    modes = {"both": (args.spares_first, not args.spares_first), "on": (True,), "off": (False,)}[args.spares]
    table: dict[str, dict] = {}
    for name, (cli_args, role) in SCENARIOS.items():
        if args.only and name not in args.only:
            continue
        rows: dict[bool, list[dict]] = {m: [] for m in modes}
        for i in range(args.runs):
            for warm in modes if i % 2 == 0 else tuple(reversed(modes)):  # alternate the order
                with tempfile.TemporaryDirectory() as d:
                    rows[warm].append(one_run(cli_args, role, warm, rng, Path(d), backend))
        both = table[name] = {("spares" if m else "cold"): summarize(r) for m, r in rows.items()}
        means = [both.get(k, {}).get("recovery_mean_s") for k in ("spares", "cold")]
        if all(means):
            both["ratio"] = round(means[0] / means[1], 2)
        print(json.dumps({name: both}), file=sys.stderr, flush=True)  # as it goes: runs are long
    return table


def report(table: dict[str, dict], as_json: bool) -> None:
    if as_json:
        print(json.dumps(table, indent=2))
        return
    print(f"{'scenario':20} {'mode':7} runs  recovery mean  worst  (fresh start-up)  spare MB rss/pss/private")
    for name, by_mode in table.items():
        for mode, t in by_mode.items():
            if mode == "ratio":
                continue
            mem = t["spare_mb"]
            mb = f"{mem['rss_mb']:.0f}/{mem['pss_mb']:.0f}/{mem['private_mb']:.0f}" if mem else "-"
            print(f"{name:20} {mode:7} {t['recovered']}/{t['runs']}  {t['recovery_mean_s']!s:>12}s "
                  f"{t['recovery_worst_s']!s:>5}s  ({t['startup_mean_s']}s)  {mb}")
        if "ratio" in by_mode:
            print(f"{name:20} spares/cold = {by_mode['ratio']}")


if __name__ == "__main__":
    main()

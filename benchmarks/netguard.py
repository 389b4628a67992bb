"""What keeping local task ports on loopback costs (src/tfdist/backends/netguard.py).

1. Building the bind interposer once: compiler plus the self-test, into a fresh cache.
2. Starting a process with it preloaded: ``python -c pass`` with and without LD_PRELOAD,
   alternating, median of N (a task's own start, importing TensorFlow, takes seconds).
3. Training through it: a 2-worker MultiWorkerMirroredStrategy ``fit`` run by ``tfdist run``,
   guarded and with TFDIST_EXPOSE_PORTS=1, alternating; worker-0's steps/s after epoch 1.
4. The alternative measured for comparison: ``unshare -Urn`` (a private user + network
   namespace) around the same ``python -c pass``, where the kernel allows it.

    python benchmarks/netguard.py [--runs 3] [--starts 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tfdist import contract
from tfdist.backends import netguard

PY = sys.executable
TFDIST = [PY, "-m", "tfdist.cli"]
TASK = Path(__file__).with_name("netguard_task.py")


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def build_cost(tmp: Path, runs: int) -> dict:
    times = []
    for i in range(runs):
        start = time.perf_counter()
        guard = netguard.prepare({}, environ=os.environ, home=tmp / f"build-{i}")
        times.append(time.perf_counter() - start)
        if guard.library is None:
            return {"error": guard.warning}
    start = time.perf_counter()
    netguard.prepare({}, environ=os.environ, home=tmp / "build-0")
    cached = time.perf_counter() - start
    return {"build_median_s": round(statistics.median(times), 3), "cached_s": round(cached, 4),
            "library": guard.library}


def start_cost(library: str, starts: int) -> dict:
    plain_env = dict(os.environ)
    guarded_env = {**os.environ, "LD_PRELOAD": library, contract.LOOPBACK_PORTS: "12345"}
    cmd = [PY, "-I", "-S", "-c", "pass"]
    unshare = shutil.which("unshare")
    ns_ok = unshare is not None and subprocess.run([unshare, "-Urn", "true"], capture_output=True).returncode == 0
    plain, guarded, ns = [], [], []
    for _ in range(starts):
        plain.append(timed(cmd, plain_env))
        guarded.append(timed(cmd, guarded_env))
        if ns_ok:
            ns.append(timed([unshare, "-Urn", *cmd], plain_env))
    out = {"plain_ms": round(statistics.median(plain) * 1e3, 2),
           "preloaded_ms": round(statistics.median(guarded) * 1e3, 2)}
    out["preload_overhead_ms"] = round(out["preloaded_ms"] - out["plain_ms"], 2)
    if ns_ok:
        out["unshare_ms"] = round(statistics.median(ns) * 1e3, 2)
        out["unshare_overhead_ms"] = round(out["unshare_ms"] - out["plain_ms"], 2)
    else:
        out["unshare"] = "not allowed here"
    return out


def training(tmp: Path, runs: int, epochs: int = 4, steps: int = 100) -> dict:
    rates: dict[str, list[float]] = {"guarded": [], "open": []}
    for i in range(runs):  # alternate so drift in machine load hits both alike
        for mode in ("guarded", "open"):
            env = {**os.environ, "TFDIST_EXPOSE_PORTS": "1" if mode == "open" else "0"}
            done = subprocess.run([*TFDIST, "run", "-q", "--json", "--runs-dir", str(tmp / "runs"),
                                   "--name", f"bench-{mode}-{i}", "--workers", "2", "--",
                                   PY, str(TASK), str(epochs), str(steps)],
                                  env=env, capture_output=True, text=True, check=True)
            log = Path(json.loads(done.stdout)["run_dir"]) / "logs" / "worker-0.log"
            line = next(ln for ln in log.read_text().splitlines() if "STEPS_PER_S" in ln)
            words = line.split()
            assert words[-1] == ("1" if mode == "guarded" else "0"), line
            rates[mode].append(float(words[words.index("STEPS_PER_S") + 1]))
    return {f"{mode}_steps_per_s": [round(r, 1) for r in rs] for mode, rs in rates.items()} | {
        "median_ratio": round(statistics.median(rates["guarded"]) / statistics.median(rates["open"]), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        report: dict = {"build": build_cost(tmp, args.runs)}
        library = report["build"].get("library")
        if library:
            report["start"] = start_cost(library, args.starts)
            report["training"] = training(tmp, args.runs)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for section, figures in report.items():
        print(f"{section}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()

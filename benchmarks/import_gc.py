"""What ``tfdist.node.import_gc`` saves a task: CPU, wall time and peak memory of whole
processes with it (``TFDIST_FREEZE_IMPORTS=1``, the default) and without (``=0``), in turn.

Two commands, each run ``--rounds`` times per variant, alternating (A B, then B A, ...) so a
pair's ratio compares two neighbours in time on a noisy machine:

- ``import``: ``from tfdist import runtime`` then ``import tensorflow, tf_keras``, nothing else;
- ``digits``: the digits example alone (``examples/digits/train_fit.py --epochs 3``, one task,
  no TF_CONFIG): the import, then tracing, 3 epochs of ``fit``, checkpoints and the model saved.

    python benchmarks/import_gc.py [--rounds 5] [--json]

Printed per command: the median user+system CPU seconds, wall seconds and peak RSS of each
variant, and the median over pairs of on/off (below 1: it saves).
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

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "import": ([sys.executable, "-c", "from tfdist import runtime\nimport tensorflow, tf_keras"], ROOT),
    "digits": ([sys.executable, "train_fit.py", "--epochs", "3"], ROOT / "examples" / "digits"),
}


def measure(argv: list[str], cwd: Path, switch: str) -> dict[str, float]:
    """One whole process: its CPU (user + system, from the kernel's accounting at reaping),
    wall seconds and peak RSS (MiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TFDIST_FREEZE_IMPORTS": switch, "TFDIST_RUN_DIR": tmp, "TMPDIR": tmp,
               "TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}
        env.pop("TF_CONFIG", None)
        err = Path(tmp, "stderr")
        with open(err, "wb") as sink:  # a file, not a pipe nobody reads until the end
            start = time.perf_counter()
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=sink)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
        if status != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({status}):\n{err.read_text(errors='replace')[-2000:]}")
    return {"cpu": usage.ru_utime + usage.ru_stime, "wall": wall, "rss": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for name, (argv, cwd) in COMMANDS.items():
        runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
        for rnd in range(args.rounds):
            for variant in (("on", "off") if rnd % 2 == 0 else ("off", "on")):
                runs[variant].append(measure(argv, cwd, "1" if variant == "on" else "0"))
        results[name] = runs
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{args.rounds} rounds per variant, load {os.getloadavg()[0]:.1f} at the end")
    for name, runs in results.items():
        for variant in ("off", "on"):
            med = {k: statistics.median(r[k] for r in runs[variant]) for k in ("cpu", "wall", "rss")}
            print(f"{name:7} {variant:3}  CPU {med['cpu']:5.2f} s  wall {med['wall']:5.2f} s  "
                  f"peak RSS {med['rss']:6.1f} MiB")
        for k in ("cpu", "wall", "rss"):
            ratio = statistics.median(a[k] / b[k] for a, b in zip(runs["on"], runs["off"], strict=True))
            print(f"{name:7} on/off {k}: {ratio:.2f}")


if __name__ == "__main__":
    main()

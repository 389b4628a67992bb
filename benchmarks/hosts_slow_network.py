"""What a slow, lossy link costs MultiWorkerMirrored training across hosts of the test bed.

Two workers on hosts h1 and h2 of a bed (tests/hosts/testbed.py; needs root) train the same
small model (benchmarks/hosts_slow_network_task.py) with TF_CONFIG naming their own hosts'
addresses; runs alternate between a plain link and h2's link slowed (default 20 ms each way
and 1 % loss, the bed's user-space wire: this kernel has no netem). Prints each run's step
rate and the median ratio slow/plain. A benchmark, not a test: the figures go to
docs/hosts.md with the date and the load.

    python benchmarks/hosts_slow_network.py [--pairs 3] [--delay-ms 20] [--loss 0.01]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.hosts.testbed import HostBed, unavailable  # noqa: E402

TASK = Path(__file__).resolve().parent / "hosts_slow_network_task.py"


def one_run(bed: HostBed, steps: int, epochs: int) -> float:
    workers = [bed.host("h1"), bed.host("h2")]
    ports = [bed.free_port(h) for h in workers]
    cluster = {"worker": [f"{h.address}:{p}" for h, p in zip(workers, ports, strict=True)]}
    procs = []
    for i, host in enumerate(workers):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}))
        procs.append(bed.run(host, [sys.executable, str(TASK), str(steps), str(epochs)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    outs = [p.communicate(timeout=900)[0] for p in procs]
    rates = [float(ln.split()[1]) for out in outs for ln in out.splitlines() if ln.startswith("RATE ")]
    if len(rates) != 2:
        raise RuntimeError(f"a worker gave no rate: {outs}")
    return min(rates)  # lockstep: both see the same rate; the slower one bounds it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--loss", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    why = unavailable()
    if why:
        sys.exit(f"hosts_slow_network: {why}")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {os.getloadavg()[0]:.1f}; "
          f"{os.cpu_count()} cores; slow = h2's link {args.delay_ms:g} ms each way, {args.loss:.0%} loss")
    ratios = []
    with HostBed.start(3) as bed:
        for pair in range(args.pairs):
            plain = one_run(bed, args.steps, args.epochs)
            bed.slow(bed.host("h2"), args.delay_ms, args.loss)
            try:
                slow = one_run(bed, args.steps, args.epochs)
            finally:
                bed.fast(bed.host("h2"))
            ratios.append(slow / plain)
            print(f"pair {pair + 1}: plain {plain:.1f} steps/s, slow {slow:.1f} steps/s, ratio {slow / plain:.3f}",
                  flush=True)
    print(f"median slow/plain step rate: {statistics.median(ratios):.3f} over {len(ratios)} pairs; "
          f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

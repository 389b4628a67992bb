"""How long a Spark or Ray job takes to restart when a worker's host is cut off, against a crash.

The MWMS example (a chief and two workers) runs across hosts of the test bed (tests/hosts/;
needs root, and Java for Spark). Spark: master on h0, workers of 3 cores on h1 and h2, tfdist
on h3. Ray (``--backend ray``): head (no CPUs) on h0, where tfdist runs too (a Ray driver must
be on a node of the cluster), nodes of 3 CPUs on h1 and h2, ``placement: spread``. Once it trains, h2 is either cut off (its link down: nothing closes its connections) or
crashed (every process on it killed: the kernel closes them), alternating. Each run prints,
from the fault: when tfdist named h2 lost (a line naming the host), and when the whole group
ran again on h1 (every task's last attempt started, from events.jsonl). The job is then
interrupted, h2 healed or its worker (node) restarted, and the next run starts. Prints the
medians and the ratio partition/crash: the price of noticing by silence (Spark: the agents'
heartbeat timeout; Ray: the GCS's health checks of the node) rather than by a closed
connection. A benchmark, not a test: the figures go to docs/benchmarks.md with the date and
the load.

    python benchmarks/hosts_partition.py [--backend spark|ray] [--pairs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.backends.spark.spark_cluster import missing  # noqa: E402
from tests.conftest import read_jsonl  # noqa: E402
from tests.hosts.clusters import RayOnHosts, SparkOnHosts, Watched, run_tfdist, running_again  # noqa: E402
from tests.hosts.testbed import HostBed, unavailable  # noqa: E402


def said(watched: Watched) -> str:
    """What tfdist said (its own lines and the summary's root cause), for an error."""
    lines = [ln for _, ln in watched.lines]
    own = [ln for ln in lines if "tfdist" in ln and ("lost" in ln or "restart" in ln or "failed" in ln)]
    cause = [ln.strip() for ln in lines if '"message"' in ln]
    return "\n".join([*own[-30:], *cause[:3]])


def one_run(bed: HostBed, cluster: SparkOnHosts | RayOnHosts, proj: Path, fault: str, n: int) -> tuple[float, float]:
    """(seconds from the fault to h2 named lost, to the group running again)."""
    h2 = bed.host("h2")
    ray = isinstance(cluster, RayOnHosts)
    runs, name = proj.parent / "runs", f"bench-{fault}-{n}"
    watched = Watched(run_tfdist(bed, bed.host("h0" if ray else "h3"), [
        "run", "--json", *cluster.args(), *(["--set", "ray.placement=spread"] if ray else []),
        "--runs-dir", str(runs), str(proj / "mwms.yaml"), "--set", f"name={name}",
        "--set", 'command=[python, train_fit.py, --epochs, "20"]', "--set", "restart.policy=on-failure", "--set", "restart.max_restarts=5",
        "--set", "restart.backoff_seconds=0"], cwd=proj.parent))
    try:
        deadline = time.monotonic() + 600
        while not any("epoch" in r for p in runs.glob(f"{name}-*/progress.jsonl") for r in read_jsonl(p)):
            if watched.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} never trained an epoch: {said(watched)}")
            time.sleep(0.3)
        run_dir = next(runs.glob(f"{name}-*"))
        cut, wall = time.monotonic(), time.time()
        if fault == "partition":
            bed.partition(h2)
        else:
            bed.crash(h2)
        try:
            while (again := running_again(run_dir)) is None or again <= wall:
                if watched.proc.poll() is not None or time.monotonic() > deadline + 600:
                    raise RuntimeError(f"{name} never ran again: {said(watched)}")
                time.sleep(0.5)
        finally:
            if fault == "partition":
                bed.heal(h2)
        named = watched.first(f"h2 ({h2.address})", after=cut)
        if named is None:
            raise RuntimeError(f"{name}: no line named h2 lost")
        print(f"{name}: h2 named lost after {named - cut:.1f} s, group running again after "
              f"{again - wall:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)  # kept if the cleanup fails
        return named - cut, again - wall
    finally:
        if watched.proc.poll() is None:
            watched.proc.send_signal(signal.SIGINT)
        with contextlib.suppress(AssertionError):  # an interrupted run may print no summary
            watched.wait(300)
        if isinstance(cluster, RayOnHosts):
            if fault == "crash":
                cluster.start_node(h2)
            else:
                cluster.wait_ended(h2)
            cluster.wait_nodes(3, timeout=300)  # a healed node was declared dead: it starts again
        else:
            if fault == "crash":
                cluster.start_worker(h2)
            cluster.wait_workers(2, timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["spark", "ray"], default="spark")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    why = unavailable() or (missing() if args.backend == "spark" else None)
    if why:
        sys.exit(f"hosts_partition: {why}")
    print(f"{args.backend}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load "
          f"{os.getloadavg()[0]:.1f}; {os.cpu_count()} cores", flush=True)
    got: dict[str, list[tuple[float, float]]] = {"crash": [], "partition": []}
    with HostBed.start(4) as bed:
        workers = [bed.host("h1"), bed.host("h2")]
        cluster = (RayOnHosts(bed, bed.host("h0"), workers, cpus=3) if args.backend == "ray"
                   else SparkOnHosts(bed, bed.host("h0"), workers, cores=3)).start()
        proj = bed.host("h0" if args.backend == "ray" else "h3").workdir / "digits"
        shutil.copytree(ROOT / "examples" / "digits", proj, ignore=shutil.ignore_patterns("__pycache__"))
        try:
            for pair in range(args.pairs):
                for fault in ("partition", "crash"):
                    named, again = one_run(bed, cluster, proj, fault, pair)
                    got[fault].append((named, again))
                    print(f"pair {pair + 1} {fault}: h2 named lost after {named:.1f} s, group running again "
                          f"after {again:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            cluster.stop()
    medians = {f: (statistics.median(n for n, _ in v), statistics.median(a for _, a in v)) for f, v in got.items()}
    for fault, (named, again) in medians.items():
        print(f"median {fault}: named lost {named:.1f} s, running again {again:.1f} s over {len(got[fault])} runs")
    print(f"partition/crash, running again: {medians['partition'][1] / medians['crash'][1]:.2f}; "
          f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

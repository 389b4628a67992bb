"""Where the test suite's time and CPU go: a pytest plugin and its report.

The suite runs in two pytest-xdist workers on a 2-core machine and is bound by CPU (its
jobs start TensorFlow, JVMs and Ray), so a test's wall time says little about what it costs
the others. The plugin records, per test, its worker and its start and end; the controlling
process samples the machine's CPU counters (``/proc/stat``, so pods and host-bed processes
outside the suite's cgroup count too) every two seconds. The report charges each second of
machine CPU to the tests running in it, split evenly: an estimate (a test is also charged
with what its neighbour and the idle clusters did meanwhile), good enough to rank them.

    export TFDIST_SUITE_PROFILE="$(mktemp -d)"
    PYTEST_ADDOPTS="-p benchmarks.suite_profile" make test
    python benchmarks/suite_profile.py "$TFDIST_SUITE_PROFILE" [--top 40]

With ``TFDIST_SUITE_PROFILE_ACCT=1`` (as root) the controller also turns on the kernel's
process accounting (``acct(2)``) into the same directory for the run: one record of CPU
time per process that ends, every process of the machine (pods, JVMs, TensorFlow tasks,
whoever started them). The report then says what kinds of process the CPU went to, which
the per-test split cannot: how many TensorFlow task processes the suite started and what
they cost. A record names a process by the name of its thread that ended last, so the
kinds are told apart by name (JVM threads, TensorFlow's and gRPC's threads) and, for
Python, by cost: a Python process of 2 CPU-s or more is counted as a TensorFlow task
(importing TensorFlow and tf_keras alone costs more than that here, after
``tfdist.runtime`` too). Processes still running when
accounting stops (the clusters' daemons, stopped after the suite) are not counted.

Nothing here changes what a test does; without ``TFDIST_SUITE_PROFILE`` the plugin records
nothing.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import ctypes
import itertools
import json
import os
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

PERIOD = 2.0
#: The process accounting file in the profile's directory (TFDIST_SUITE_PROFILE_ACCT=1).
ACCT = "acct"
#: A Python process of at least this many CPU seconds is taken for a TensorFlow task.
TF_TASK_CPU = 2.0


def _out() -> Path | None:
    where = os.environ.get("TFDIST_SUITE_PROFILE")
    return Path(where) if where else None


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (every core, every cgroup)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def _sample(path: Path, stop: threading.Event) -> None:
    with open(path, "a") as f:
        while not stop.is_set():
            f.write(f"{time.time():.2f} {machine_cpu_seconds():.2f}\n")
            f.flush()
            stop.wait(PERIOD)


#: Whether this process records its tests: an xdist worker, or a run without xdist (the
#: controller of workers gets their start and finish too, later, and must not count them).
_RECORDS = False
_STARTED: dict[str, float] = {}


def pytest_configure(config: Any) -> None:
    global _RECORDS
    out = _out()
    worker = hasattr(config, "workerinput")
    _RECORDS = out is not None and (worker or not config.getoption("numprocesses", None))
    if out is None or worker:  # the controller (or the one process) samples the CPU
        return
    out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    thread = threading.Thread(target=_sample, args=(out / "cpu.txt", stop), daemon=True)
    thread.start()
    config._suite_profile_stop = stop  # noqa: SLF001 (pytest's config takes attributes)
    if os.environ.get("TFDIST_SUITE_PROFILE_ACCT") == "1":
        (out / ACCT).touch()
        _acct(str(out / ACCT))


def pytest_unconfigure(config: Any) -> None:
    stop = getattr(config, "_suite_profile_stop", None)
    if stop is not None:
        stop.set()
        if os.environ.get("TFDIST_SUITE_PROFILE_ACCT") == "1":
            _acct(None)


def _acct(path: str | None) -> None:
    """Process accounting on into ``path``, or off (None); a refusal (not root) is said."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) != 0:
        print(f"suite_profile: acct: {os.strerror(ctypes.get_errno())}", file=sys.stderr)


class Ended(NamedTuple):
    """One process's accounting record: its name, when it started (epoch s), how long it
    ran and the CPU seconds (user + system) it used."""

    name: str
    start: float
    elapsed: float
    cpu: float


#: Linux's ``struct acct_v3`` (64 bytes): the fields read here.
_RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")
#: Thread names a JVM's last thread has (a record's name is its last thread's).
_JVM = ("java", "Reference Handl", "Monitor Deflati", "Signal Dispatch", "C1 CompilerThre",
        "C2 CompilerThre", "Service Thread", "Common-Cleaner", "GC Thread", "Notification Th",
        "Finalizer", "VM Thread", "VM Periodic Tas", "DestroyJavaVM", "process reaper")


def _comp(value: int) -> float:
    """A ``comp_t`` (13-bit mantissa, 3-bit base-8 exponent) in seconds (units of 1/100 s)."""
    return ((value & 0x1FFF) << (3 * (value >> 13))) / 100.0


def read_acct(data: bytes) -> list[Ended]:
    """The records of a version-3 accounting file. Pure."""
    found = []
    for offset in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        fields = _RECORD.unpack_from(data, offset)
        if fields[1] != 3:  # ac_version
            continue
        started, elapsed, utime, stime, name = fields[8], fields[9], fields[10], fields[11], fields[18]
        found.append(Ended(name.split(b"\0")[0].decode(errors="replace"), float(started),
                           elapsed / 100.0, _comp(utime) + _comp(stime)))
    return found


def kind_of(process: Ended) -> str:
    """What a process was, by its name and cost (see the module's docstring). Pure."""
    name = process.name
    if name.startswith(("python", "tf_", "grpc_", "event_engine")):
        return "TensorFlow tasks" if process.cpu >= TF_TASK_CPU else "other Python"
    if name.startswith(_JVM) or "UI-" in name:
        return "JVMs"
    if name.startswith(("ray", "raylet", "gcs_server")):
        return "Ray"
    if name.startswith(("kube", "etcd", "containerd", "runc", "kwok", "coredns", "jobset")):
        return "Kubernetes"
    return "other"


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if _RECORDS:
        _STARTED[nodeid] = time.time()


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    """After setup, call and teardown of ``nodeid`` (a fixture's cost goes to the test that
    first or last used it)."""
    out, start = _out(), _STARTED.pop(nodeid, None)
    if out is None or start is None:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(out / f"tests-{worker}.jsonl", "a") as f:
        f.write(json.dumps({"worker": worker, "test": nodeid, "start": start, "end": time.time()}) + "\n")


# -- the report ------------------------------------------------------------------------


def group_of(test: str) -> str:
    """The xdist group a test runs in: a directory of tests/conftest.py's SHARED (summed as
    one), else its module."""
    from tests.conftest import SHARED

    module = test.split("::", 1)[0]
    return next((g for g in SHARED if module.startswith(g)), module)


def charge(tests: list[dict[str, Any]], samples: list[tuple[float, float]]) -> dict[str, float]:
    """Each test's share of the machine's CPU: every interval between two samples split
    evenly over the tests running in it. Pure."""
    starts = sorted(tests, key=lambda t: t["start"])
    begun = [t["start"] for t in starts]
    shares: dict[str, float] = collections.defaultdict(float)
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        mid = (t0 + t1) / 2
        running = [t for t in starts[:bisect.bisect_right(begun, mid)] if t["end"] > mid]
        for t in running:
            shares[t["test"]] += (c1 - c0) / len(running)
    return shares


def report(where: Path, top: int) -> None:
    tests = [json.loads(line) for path in sorted(where.glob("tests-*.jsonl")) for line in path.read_text().splitlines()]
    samples = [(float(a), float(b)) for a, b in (line.split() for line in (where / "cpu.txt").read_text().splitlines())]
    if not tests or len(samples) < 2:
        raise SystemExit(f"{where}: no tests or no CPU samples recorded")
    shares = charge(tests, samples)
    first, last = min(t["start"] for t in tests), max(t["end"] for t in tests)
    inside = [(t, c) for t, c in samples if first <= t <= last]
    cpu = inside[-1][1] - inside[0][1] if len(inside) > 1 else 0.0
    print(f"{len(tests)} tests in {last - first:.0f} s; the machine's CPU meanwhile {cpu:.0f} s "
          f"({cpu / max(inside[-1][0] - inside[0][0], 1):.2f} cores busy on average)")
    for worker in sorted({t["worker"] for t in tests}):
        mine = [t for t in tests if t["worker"] == worker]
        print(f"  {worker}: {sum(t['end'] - t['start'] for t in mine):.0f} s of tests, "
              f"last ended at {max(t['end'] for t in mine) - first:.0f} s")
    groups: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for t in tests:
        g = groups[group_of(t["test"])]
        g[0] += 1
        g[1] += t["end"] - t["start"]
        g[2] += shares.get(t["test"], 0.0)
    print(f"\n{'group':60} {'tests':>5} {'wall s':>7} {'CPU s':>7}")
    for name, (n, wall, used) in sorted(groups.items(), key=lambda kv: -kv[1][2]):
        print(f"{name:60} {n:5.0f} {wall:7.0f} {used:7.0f}")
    print(f"\n{'CPU s':>6} {'wall s':>7}  test (the {top} costliest)")
    by_test = {t["test"]: t for t in tests}
    for test, used in sorted(shares.items(), key=lambda kv: -kv[1])[:top]:
        t = by_test[test]
        print(f"{used:6.0f} {t['end'] - t['start']:7.1f}  {test}")
    if (where / ACCT).exists():
        ended = [p for p in read_acct((where / ACCT).read_bytes()) if first <= p.start + p.elapsed <= last]
        report_processes(ended, tests, cpu)


def report_processes(ended: list[Ended], tests: list[dict[str, Any]], machine_cpu: float) -> None:
    """The CPU of the processes that ended during the tests, by kind; the TensorFlow tasks by
    group (a task started while two tests ran counts half to each)."""
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    tasks = []
    for p in ended:
        kind = kind_of(p)
        kinds[kind][0] += 1
        kinds[kind][1] += p.cpu
        if kind == "TensorFlow tasks":
            tasks.append(p)
    print(f"\nprocesses that ended during the tests (the machine's CPU meanwhile {machine_cpu:.0f} s)")
    print(f"{'kind':20} {'processes':>9} {'CPU s':>7} {'share':>6}")
    for kind, (n, used) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"{kind:20} {n:9.0f} {used:7.0f} {used / max(machine_cpu, 1):6.0%}")
    if tasks:
        costs = sorted(p.cpu for p in tasks)
        print(f"TensorFlow tasks: median {costs[len(costs) // 2]:.1f} CPU s each")
    by_group: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for p in tasks:
        running = [group_of(t["test"]) for t in tests if t["start"] - 1 <= p.start <= t["end"] + 1]
        for group in running:
            by_group[group][0] += 1 / len(running)
            by_group[group][1] += p.cpu / len(running)
    print(f"\n{'group':60} {'TF tasks':>8} {'CPU s':>7}")
    for name, (n, used) in sorted(by_group.items(), key=lambda kv: -kv[1][1])[:15]:
        print(f"{name:60} {n:8.1f} {used:7.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("where", type=Path, help="the directory TFDIST_SUITE_PROFILE named")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.conftest, run as a script
    report(args.where, args.top)


if __name__ == "__main__":
    main()

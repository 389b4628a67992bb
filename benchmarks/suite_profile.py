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

Nothing here changes what a test does; without ``TFDIST_SUITE_PROFILE`` the plugin records
nothing.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

PERIOD = 2.0


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


def pytest_unconfigure(config: Any) -> None:
    stop = getattr(config, "_suite_profile_stop", None)
    if stop is not None:
        stop.set()


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("where", type=Path, help="the directory TFDIST_SUITE_PROFILE named")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.conftest, run as a script
    report(args.where, args.top)


if __name__ == "__main__":
    main()

"""CPU and memory of each task's process tree, read from ``/proc`` where the task runs.

Node code (standard library only): the local backend samples its tasks with it, and the
Spark/YARN agent samples its one task and sends the figures over its channel. A sample is
the whole tree under the task's process (its children too: a launcher script's Python, a
data loader's workers): CPU as a share of one core since the previous sample (1.0 = one
core busy) and the resident set size summed over the tree. Memory is RSS, not the cgroup's
``memory.current``, which counts page cache too; the limit, when the task has one, is its
role's ``resources.memory``.

What is pure (parsing ``stat``, finding a tree, turning two CPU totals into a share) is
separate from the reading, so it is tested without processes. Cost: one pass over
``/proc/*/stat`` per sampling round (every task of the node at once), not per task.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: Seconds between two samples of a task (``TFDIST_USAGE_INTERVAL``; 0 turns sampling off).
INTERVAL = 5.0
INTERVAL_VAR = "TFDIST_USAGE_INTERVAL"
#: A task at or above this share of its memory limit is flagged (``status``, the page).
NEAR_LIMIT = 0.9

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class ProcStat:
    """What one ``/proc/PID/stat`` line says that a sample needs."""

    pid: int
    ppid: int
    cpu_ticks: int  # utime + stime
    rss_pages: int


@dataclass(frozen=True)
class UsageSample:
    """One task's use at one moment: ``cpu`` in cores since the previous sample (None for
    the first), ``rss`` bytes of its tree, ``limit`` bytes of memory it may use (None: no limit)."""

    time: float
    cpu: float | None
    rss: int
    limit: int | None = None
    #: Bytes its memory cgroup is charged (what the kernel holds against the limit), when
    #: it has one; else the limit is compared with ``rss``.
    charged: int | None = None

    def near_limit(self) -> bool:
        return near_limit(self.used, self.limit)

    @property
    def used(self) -> int:
        """What counts against the limit: the cgroup's charge if known, else the RSS."""
        return self.charged if self.charged is not None else self.rss

    def to_dict(self) -> dict[str, float | int | None]:
        return {"time": round(self.time, 3), "cpu": None if self.cpu is None else round(self.cpu, 3),
                "rss": self.rss, "limit": self.limit, "charged": self.charged}


def interval(environ: Mapping[str, str]) -> float:
    """The sampling interval ``environ`` asks for (0: off); ValueError naming the variable
    and what it accepts when it is not a number of seconds from 0.1 to 3600, or 0."""
    text = environ.get(INTERVAL_VAR, "")
    if not text.strip():
        return INTERVAL
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value != 0 and not 0.1 <= value <= 3600:  # NaN fails both
        raise ValueError(f"{INTERVAL_VAR}={text[:40]!r}: give seconds between usage samples, "
                         "0.1 to 3600, or 0 to turn sampling off")
    return value


def near_limit(rss: int | None, limit: int | None, share: float = NEAR_LIMIT) -> bool:
    """Whether ``rss`` (or a cgroup's charge) is at least ``share`` of ``limit`` (never
    without a limit)."""
    return bool(rss is not None and limit and rss >= share * limit)


def parse_stat(text: str) -> ProcStat | None:
    """One ``/proc/PID/stat`` line, or None if it is not one. The command name (field 2) is
    in parentheses and may hold spaces and parentheses itself: fields are counted after the
    last ``)``."""
    head, sep, rest = text.rpartition(")")
    if not sep:
        return None
    fields = rest.split()
    try:
        pid = int(head.split("(", 1)[0])
        # after the name: state(0) ppid(1) ... utime(11) stime(12) ... rss(21)
        return ProcStat(pid, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[21]))
    except (ValueError, IndexError):
        return None


def tree(root: int, stats: Mapping[int, ProcStat]) -> list[ProcStat]:
    """``root`` and every descendant of it in ``stats`` (by parent pid)."""
    children: dict[int, list[int]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st.pid)
    found, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        found.append(stats[pid])
        todo.extend(children.get(pid, ()))
    return found


def cpu_share(before: tuple[float, int] | None, now: tuple[float, int],
              ticks_per_second: int = _TICKS) -> float | None:
    """Cores used between two ``(time, cpu ticks)`` readings of a tree; None for the first
    reading or when time did not move. A tree that lost a child loses its ticks: never below 0."""
    if before is None or now[0] <= before[0]:
        return None
    return max(0.0, (now[1] - before[1]) / ticks_per_second / (now[0] - before[0]))


def read_stats(proc: str = "/proc") -> dict[int, ProcStat]:
    """Every process's stat on this node (a process that ends while read is left out)."""
    out: dict[int, ProcStat] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as f:
                st = parse_stat(f.read().decode("utf-8", "replace"))
        except OSError:
            continue
        if st is not None:
            out[st.pid] = st
    return out


class Sampler:
    """Samples task trees: :meth:`sample` takes the pids to look at (task name -> pid and
    limit) and returns each one's :class:`UsageSample`. It keeps each task's previous CPU
    reading (by pid: a new attempt starts again from None)."""

    def __init__(self, read: Callable[[], Mapping[int, ProcStat]] = read_stats,
                 clock: Callable[[], float] = time.time, page: int = _PAGE,
                 ticks_per_second: int = _TICKS) -> None:
        self._read, self._clock, self._page, self._ticks = read, clock, page, ticks_per_second
        self._before: dict[str, tuple[int, float, int]] = {}  # task -> (pid, time, ticks)

    def sample(self, tasks: Mapping[str, tuple[int, int | None]]) -> dict[str, UsageSample]:
        if not tasks:
            return {}
        stats, now = self._read(), self._clock()
        out = {}
        for name, (pid, limit) in tasks.items():
            procs = tree(pid, stats)
            if not procs:
                continue  # gone between its start and now
            ticks = sum(p.cpu_ticks for p in procs)
            prev = self._before.get(name)
            before = (prev[1], prev[2]) if prev is not None and prev[0] == pid else None
            self._before[name] = (pid, now, ticks)
            out[name] = UsageSample(now, cpu_share(before, (now, ticks), self._ticks),
                                    sum(p.rss_pages for p in procs) * self._page, limit)
        for name in set(self._before) - set(tasks):
            del self._before[name]
        return out


class SamplingThread:
    """Calls ``report(samples)`` every ``interval`` seconds with the samples of what
    ``tasks()`` names, until :meth:`stop`. A failing round is skipped, never fatal: sampling
    must not hurt the tasks it watches."""

    def __init__(self, tasks: Callable[[], Mapping[str, tuple[int, int | None]]],
                 report: Callable[[Mapping[str, UsageSample]], None], interval: float = INTERVAL,
                 sampler: Sampler | None = None) -> None:
        self._tasks, self._report, self.interval = tasks, report, interval
        self.sampler = sampler or Sampler()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfdist-usage", daemon=True)

    def start(self) -> SamplingThread:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                found = self.sampler.sample(self._tasks())
                if found:
                    self._report(found)
            except Exception:  # noqa: BLE001 - a round that fails is one sample fewer
                continue

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)


def latest(before: Mapping[str, float | int | None] | None,
           sample: UsageSample) -> dict[str, float | int | None]:
    """A task's latest use with its peaks so far (``before``: the previous one, or None),
    what the job store keeps on the task's row for ``status`` and the page."""
    prev = before or {}
    peak_rss = max(int(prev.get("peak_rss") or 0), sample.rss)
    cpus = [c for c in (prev.get("peak_cpu"), sample.cpu) if c is not None]
    return {**sample.to_dict(), "peak_rss": peak_rss,
            "peak_cpu": round(max(cpus), 3) if cpus else None}

"""A task's memory and CPU limits, enforced by the kernel: one cgroup per task process.

The local backend puts every process it starts for a role with ``resources.memory`` or
``resources.cpus`` in a group of its own, under ``tfdist/<owner>-<token>/`` of the cgroup
hierarchy that has the controller:

- cgroup v2 (the unified hierarchy lists ``memory``/``cpu`` in ``cgroup.controllers``):
  ``memory.max``, ``memory.swap.max`` = 0 where the kernel accounts swap (no escape into
  swap), ``cpu.max``;
- cgroup v1 (a ``memory`` and a ``cpu`` hierarchy): ``memory.limit_in_bytes``,
  ``memory.memsw.limit_in_bytes`` where the kernel accounts swap, ``cpu.cfs_period_us`` and
  ``cpu.cfs_quota_us``.

The child writes itself into the group's ``cgroup.procs`` between fork and exec
(:meth:`TaskGroup.preexec`, files the parent opened), so the program never runs, and never
allocates, outside its limit; a write the kernel refuses fails the start. When the task
ends, its OOM kill counter (v2 ``memory.events`` ``oom_kill``, v1 ``memory.oom_control``
``oom_kill``) is read before the group goes (:meth:`TaskGroup.close`). The job's directory is
named after its owner's pid and start time, so a later run removes what a SIGKILLed owner
left (:func:`sweep`), and the guardian removes it when its owner dies (``%DIR``).

Standard library only: :mod:`tfdist.node` code (see its package docstring).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

#: The directory under a hierarchy's root that holds every tfdist job's groups.
BASE = "tfdist"
#: The CFS period every quota is a share of (the kernel's default, 100 ms).
PERIOD_US = 100_000
#: The smallest quota the kernel takes (1 ms per period).
MIN_QUOTA_US = 1_000
#: How long a group's removal waits for its killed processes to leave it.
REMOVE_WAIT = 2.0


class CgroupError(Exception):
    """The kernel or this user cannot give a task its limits; the message says why."""


@dataclass(frozen=True)
class Limits:
    """One task's limits: bytes of memory and CPUs (a share of one per CFS period)."""

    memory: int | None = None
    cpus: float | None = None

    @property
    def wanted(self) -> bool:
        return self.memory is not None or self.cpus is not None

    def controllers(self) -> tuple[str, ...]:
        return tuple(c for c, v in (("memory", self.memory), ("cpu", self.cpus)) if v is not None)


def quota_us(cpus: float, period_us: int = PERIOD_US) -> int:
    """The CFS quota that gives ``cpus`` CPUs per ``period_us`` (never below the kernel's minimum)."""
    return max(MIN_QUOTA_US, round(cpus * period_us))


@dataclass(frozen=True)
class Layout:
    """Where each controller lives on this node: ``roots`` maps ``memory``/``cpu`` to the
    directory of its hierarchy, ``version`` 1 or 2 (one version for all of a job's limits)."""

    version: int
    roots: Mapping[str, str]

    def hierarchies(self) -> list[str]:
        """Each distinct hierarchy once (v2 has one for every controller; v1 may co-mount)."""
        return sorted(set(self.roots.values()))


def parse_mounts(text: str) -> list[tuple[str, str, set[str]]]:
    """``/proc/self/mounts`` -> ``(mount point, type, options)`` of each cgroup mount."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] not in ("cgroup", "cgroup2"):
            continue
        point = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        found.append((point, fields[2], set(fields[3].split(","))))
    return found


def choose(mounts: list[tuple[str, str, set[str]]], v2_controllers: Mapping[str, set[str]],
           wanted: Iterable[str]) -> Layout:
    """The hierarchy that carries every ``wanted`` controller: cgroup v2 when one unified
    mount offers them all (its ``cgroup.controllers``, ``v2_controllers`` by mount point),
    else cgroup v1 when each has a v1 mount (a controller is in one hierarchy at a time, so
    on a hybrid machine whichever holds it wins). Raises :class:`CgroupError` naming what
    is missing."""
    wanted = tuple(wanted)
    for point, kind, _ in mounts:
        if kind == "cgroup2" and set(wanted) <= v2_controllers.get(point, set()):
            return Layout(2, {c: point for c in wanted})
    roots: dict[str, str] = {}
    for point, kind, options in mounts:
        if kind == "cgroup":
            for controller in wanted:
                if controller in options and controller not in roots:
                    roots[controller] = point
    in_v2 = set().union(*v2_controllers.values()) if v2_controllers else set()
    missing = [c for c in wanted if c not in roots and c not in in_v2]
    if missing:
        raise CgroupError(
            f"the kernel offers no '{missing[0]}' cgroup controller here (no cgroup v1 hierarchy "
            "has it and no cgroup2 mount lists it in cgroup.controllers)"
        )
    split = [c for c in wanted if c not in roots]
    if split:
        raise CgroupError(f"the '{split[0]}' controller is in cgroup v2 and the others in v1; "
                          "tfdist needs a job's controllers in one version")
    return Layout(1, roots)


def detect(wanted: Iterable[str], mounts_file: str = "/proc/self/mounts") -> Layout:
    """:func:`choose` on this node's mounts."""
    try:
        with open(mounts_file) as handle:
            mounts = parse_mounts(handle.read())
    except OSError as err:
        raise CgroupError(f"cannot read {mounts_file}: {err.strerror}") from None
    v2: dict[str, set[str]] = {}
    for point, kind, _ in mounts:
        if kind == "cgroup2":
            with contextlib.suppress(OSError), open(os.path.join(point, "cgroup.controllers")) as handle:
                v2[point] = set(handle.read().split())
    return choose(mounts, v2, wanted)


def owner_tag(pid: int | None = None) -> str:
    """``<pid>.<start time in clock ticks>`` of a process: unique even after pid reuse."""
    pid = os.getpid() if pid is None else pid
    with open(f"/proc/{pid}/stat") as handle:
        stat = handle.read()
    return f"{pid}.{stat[stat.rindex(')') + 2:].split()[19]}"


def owner_alive(tag: str) -> bool:
    """Is the process a job directory's name starts with (``<pid>.<start>-...``) still running?"""
    head = tag.split("-", 1)[0]
    pid, _, _ = head.partition(".")
    if not pid.isdigit():
        return False
    try:
        return owner_tag(int(pid)) == head
    except (OSError, IndexError):
        return False


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def counter(text: str, name: str) -> int | None:
    """The value of ``name`` in a flat keyed file (``memory.events``, ``memory.oom_control``,
    ``cpu.stat``), or None when the kernel does not report it."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return None


#: The file that limits swap, by cgroup version: present only where the kernel accounts swap.
SWAP_FILE = {1: "memory.memsw.limit_in_bytes", 2: "memory.swap.max"}


def limit_files(version: int, limits: Limits, swap: bool) -> list[tuple[str, str, str]]:
    """``(controller, file, value)`` to write into a new group, in order (v1's memsw limit
    must not be below the memory limit, so it follows it). ``swap``: the kernel accounts
    swap (:data:`SWAP_FILE` exists), so the task gets none beyond its memory limit."""
    files: list[tuple[str, str, str]] = []
    if limits.memory is not None:
        if version == 2:
            files.append(("memory", "memory.max", str(limits.memory)))
            if swap:
                files.append(("memory", "memory.swap.max", "0"))
        else:
            files.append(("memory", "memory.limit_in_bytes", str(limits.memory)))
            if swap:
                files.append(("memory", "memory.memsw.limit_in_bytes", str(limits.memory)))
    if limits.cpus is not None:
        quota = quota_us(limits.cpus)
        if version == 2:
            files.append(("cpu", "cpu.max", f"{quota} {PERIOD_US}"))
        else:
            files += [("cpu", "cpu.cfs_period_us", str(PERIOD_US)), ("cpu", "cpu.cfs_quota_us", str(quota))]
    return files


def _procs(directory: str) -> list[int]:
    try:
        return [int(p) for p in _read(os.path.join(directory, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def remove_tree(directory: str, wait: float = REMOVE_WAIT) -> bool:
    """SIGKILL every process in ``directory`` and the groups below it, then remove them, the
    deepest first; True when it is gone. A killed process leaves its group when it exits,
    so a busy group is tried again for up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    groups = [directory]
    with contextlib.suppress(OSError):
        for here, dirs, _ in os.walk(directory):
            groups += [os.path.join(here, d) for d in dirs]
    for group in reversed(groups):
        while True:
            for pid in _procs(group):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            try:
                os.rmdir(group)
                break
            except FileNotFoundError:
                break
            except OSError as err:
                if err.errno != errno.EBUSY or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
    return not os.path.exists(directory)


def sweep(roots: Iterable[str] | None = None, mounts_file: str = "/proc/self/mounts") -> int:
    """Remove the job directories whose owner is gone (it was SIGKILLed and its guardian
    too) from ``roots``, by default every cgroup hierarchy mounted here (a job that limits
    memory only also clears what a job that limited CPUs left); returns how many."""
    if roots is None:
        try:
            with open(mounts_file) as handle:
                roots = [point for point, _, _ in parse_mounts(handle.read())]
        except OSError:
            roots = []
    removed = 0
    for root in roots:
        base = os.path.join(root, BASE)
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            path = os.path.join(base, name)
            if os.path.isdir(path) and not owner_alive(name) and remove_tree(path):
                removed += 1
    return removed


class JobGroups:
    """The groups of one job on this node, under ``<hierarchy>/tfdist/<owner>-<token>``."""

    def __init__(self, layout: Layout, token: str) -> None:
        self.layout = layout
        self.name = f"{owner_tag()}-{token}"
        self.dirs = {root: os.path.join(root, BASE, self.name) for root in layout.hierarchies()}
        self._numbers = itertools.count(1)  # next() is atomic: spares are made on another thread
        self._swap: bool | None = None

    def _prepare(self) -> None:
        """The job's directories, with the controllers enabled below them on cgroup v2."""
        for root, job_dir in self.dirs.items():
            if os.path.isdir(job_dir):
                continue
            if self.layout.version == 2:
                enable = " ".join(f"+{c}" for c in sorted(set(self.layout.roots)))
                for parent in (root, os.path.join(root, BASE)):
                    os.makedirs(parent, exist_ok=True)
                    _write(os.path.join(parent, "cgroup.subtree_control"), enable)
                os.makedirs(job_dir, exist_ok=True)
                _write(os.path.join(job_dir, "cgroup.subtree_control"), enable)
            else:
                os.makedirs(job_dir, exist_ok=True)

    def create(self, name: str, limits: Limits) -> TaskGroup:
        """A new group for one process of task ``name`` with ``limits`` written; raises
        OSError (and leaves nothing behind) when the kernel refuses any of it."""
        self._prepare()
        leaf = f"{name}.{next(self._numbers)}"
        dirs = {c: os.path.join(self.dirs[root], leaf) for c, root in self.layout.roots.items()
                if c in limits.controllers()}
        made: list[str] = []
        try:
            for directory in dict.fromkeys(dirs.values()):
                os.mkdir(directory)
                made.append(directory)
            if self._swap is None and "memory" in dirs:
                self._swap = os.path.exists(os.path.join(dirs["memory"], SWAP_FILE[self.layout.version]))
            for controller, filename, value in limit_files(self.layout.version, limits, bool(self._swap)):
                _write(os.path.join(dirs[controller], filename), value)
        except OSError:
            for directory in made:
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
            raise
        return TaskGroup(self.layout.version, dirs, limits)

    def close(self) -> bool:
        """Remove the job's directories (whatever is still in them is killed); True when gone."""
        return all([remove_tree(d) for d in self.dirs.values()])


class TaskGroup:
    """One task process's group (a directory per hierarchy it uses)."""

    def __init__(self, version: int, dirs: Mapping[str, str], limits: Limits) -> None:
        self.version, self.dirs, self.limits = version, dict(dirs), limits
        #: How many processes the kernel killed for memory here; read by :meth:`close`.
        self.oom_kills = 0

    def preexec(self) -> tuple[Callable[[], None], Callable[[], None]]:
        """``(enter, done)``: ``enter`` runs in the forked child before exec and writes it into
        every directory's ``cgroup.procs`` ("0" is the writer itself), through files opened
        here in the parent (no path lookups, no allocation in the child); ``done`` closes
        them in the parent after the spawn."""
        fds: list[int] = []
        try:
            for directory in dict.fromkeys(self.dirs.values()):
                fds.append(os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise

        def enter() -> None:
            for fd in fds:
                os.write(fd, b"0")

        def done() -> None:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

        return enter, done

    def read_oom_kills(self) -> int:
        """The kernel's count of OOM kills in this group (0 without a memory limit)."""
        directory = self.dirs.get("memory")
        if directory is None:
            return 0
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            found = counter(_read(os.path.join(directory, name)), "oom_kill")
            if found is None and self.version == 1:  # kernels before 4.13: no counter, only failures
                failed = int(_read(os.path.join(directory, "memory.failcnt")).strip() or 0)
                found = 1 if failed else 0
        except (OSError, ValueError):
            return 0
        return found or 0

    def memory_used(self) -> int | None:
        """Bytes the kernel charges to this group (v2 ``memory.current``, v1
        ``memory.usage_in_bytes``): what it compares with the limit before an OOM kill,
        unlike a process's RSS (which counts shared library pages charged elsewhere). None
        without a memory controller or when it cannot be read."""
        directory = self.dirs.get("memory")
        if directory is None:
            return None
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        try:
            return int(_read(os.path.join(directory, name)).strip())
        except (OSError, ValueError):
            return None

    def cpu_stat(self) -> dict[str, int]:
        """The group's ``cpu.stat`` (v1: nr_periods, nr_throttled, throttled_time in ns; v2:
        usage_usec, nr_throttled, throttled_usec, ...)."""
        directory = self.dirs.get("cpu")
        if directory is None:
            return {}
        try:
            text = _read(os.path.join(directory, "cpu.stat"))
        except OSError:
            return {}
        return {k: int(v) for k, _, v in (line.partition(" ") for line in text.splitlines()) if v.isdigit()}

    def close(self) -> bool:
        """The task ended: read its OOM kills, kill what is left in the group, remove it."""
        self.oom_kills = self.read_oom_kills()
        return all([remove_tree(d) for d in dict.fromkeys(self.dirs.values())])

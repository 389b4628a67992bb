"""The guardian: a tiny separate process that SIGKILLs a task's process group, and every
process marked with its token, if the process that started the task dies without saying so.

PR_SET_PDEATHSIG kills a task when its spawning thread dies, but not what the task started
(its group, or a daemon that left the group); the guardian covers those. It reads one word a
line on its stdin, so it needs nothing but a pipe, and at end-of-file (its owner was
SIGKILLed: the kernel closed the pipe) it kills everything it was told of: the stdin
watchdog (:mod:`tfdist.node.watchdog`) the reapers use too.

Standard library and the node package only: shipped by value with :mod:`tfdist.node.procs`
to Ray nodes and Spark executors where tfdist is not installed. The guardian process runs
:data:`SOURCE`, a text built here (the watchdog's source and the guardian's own part), so
what travels is a string.
"""

from __future__ import annotations

import contextlib
import inspect
import subprocess
import sys
import threading

from tfdist.node import watchdog

#: The guardian's own part (after :mod:`tfdist.node.watchdog`'s): ``+PGID`` / ``-PGID``
#: register and forget a task's group, ``@TOKEN`` a token whose processes die too (those that
#: left their group), ``%DIR`` a job's cgroup directory (tfdist.node.cgroups) whose processes
#: die and whose groups are removed, ``exit`` ends it quietly. At end-of-file (its owner died)
#: it kills everything it knows.
_BODY = '''
import contextlib, os, signal, time
groups, tokens, cgroups = set(), set(), set()
def _told(word):
    if word[:1] == "+":
        groups.add(int(word[1:]))
    elif word[:1] == "-":
        groups.discard(int(word[1:]))
    elif word[:1] == "@":
        tokens.add(word[1:].encode())
    elif word[:1] == "%":
        cgroups.add(word[1:])
if watch(_told):
    os._exit(0)  # no teardown: the owner waits for this exit at the end of every job
for pgid in groups:
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
marks = [b"TFDIST_PROC_TOKEN=" + t for t in tokens]  # procs.TOKEN_VAR
for pid in [p for p in os.listdir("/proc") if p.isdigit()] if marks else []:
    try:
        with open("/proc/" + pid + "/environ", "rb") as handle:
            entries = handle.read().split(b"\\0")
    except OSError:
        continue
    if any(e == m or e.startswith(m + b"/") for e in entries for m in marks):
        with contextlib.suppress(OSError):
            os.kill(int(pid), signal.SIGKILL)
for top in cgroups:  # as cgroups.remove_tree: kill what is in each group, remove the deepest first
    found = [top]
    for here, dirs, _ in os.walk(top):
        found += [os.path.join(here, d) for d in dirs]
    deadline = time.monotonic() + 5
    for group in reversed(found):
        while os.path.isdir(group):
            try:
                with open(os.path.join(group, "cgroup.procs")) as handle:
                    pids = handle.read().split()
            except OSError:
                pids = []
            for pid in pids:
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            try:
                os.rmdir(group)
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
'''
#: A detached guardian forks away from its owner first (its owner's direct children may die with it).
_DETACH = "\nimport os\nif os.fork():\n    os._exit(0)\nos.setsid()\n"
#: The guardian's program, run as ``python -I -S -c``: the watchdog's source (read here, where
#: tfdist is; by the time this module travels by value it is this text), then the guardian's.
_WATCHDOG = inspect.getsource(watchdog)
SOURCE = _WATCHDOG + _BODY
DETACHED_SOURCE = _WATCHDOG + _DETACH + _BODY


class Guardian:
    """A tiny separate process that kills the registered process groups if its owner dies
    without saying ``exit`` (its stdin reaches end-of-file). ``detached``: forked away from
    the owner, for owners whose direct children are killed with them (Ray workers)."""

    def __init__(self, *, detached: bool = False) -> None:
        self._detached = detached
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        if self._proc is not None:
            return
        source = DETACHED_SOURCE if self._detached else SOURCE
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", source],
            stdin=subprocess.PIPE, text=True, start_new_session=True,
        )
        if self._detached:
            self._proc.wait()  # the guardian itself runs on, holding the pipe's read end

    def tell(self, message: str) -> None:
        with self._lock:
            with contextlib.suppress(OSError):
                self._ensure()
            proc = self._proc
            if proc is None or proc.stdin is None:
                return
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write(message + "\n")
                proc.stdin.flush()

    def close(self) -> None:
        """The owner ends cleanly: the guardian exits without killing anything."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        watchdog.dismiss(proc, wait=not self._detached)

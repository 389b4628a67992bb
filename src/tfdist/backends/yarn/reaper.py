"""The reaper: a tiny separate process that kills, through the ResourceManager, the live
applications of one run (those carrying its exact ``tfdist-run-TOKEN`` tag) when tfdist's
process ends without saying so.

Why it exists: tfdist kills its applications at every end it sees (its backend's close);
a SIGKILLed tfdist sees none. A running application then ends by itself (its agents lose
tfdist's connection and exit), but one still ACCEPTED (queued) has no agent yet, and would
stay live at the RM for as long as it waits in the queue; a Spark driver JVM killed with
tfdist leaves its application the same way.

Like the task guardian (:mod:`tfdist.node.guardian`) it needs nothing but a pipe: it
waits with the same stdin watchdog (:mod:`tfdist.node.watchdog`). ``exit`` ends it
quietly (tfdist says so after its own cleanup); end-of-file means its owner died (the
kernel closed the pipe), and it reaps: lists the run's applications at the RM, kills those
:func:`doomed` picks, and repeats until, at least :data:`SETTLE` seconds after its owner
died (a submission still in flight when tfdist died shows up late), none is live; an RM
that does not answer is retried until :data:`GIVE_UP` seconds have passed, then it gives up
and exits. What it did goes to the run's log file when it was given one, and with each kill
to the application's diagnostics at the RM.

It runs as ``python -I -S`` (no user environment, no site hooks: it starts in milliseconds
and no user setting changes what it does), with the directory tfdist was imported from
appended to its ``sys.path`` (after the standard library's, so nothing there shadows it).
It imports this module, the RM client tfdist uses itself (:mod:`tfdist.backends.yarn.rest`)
and the watchdog, and through their packages nothing but the standard library (its process
test would fail otherwise). It runs in a session of its own (a Ctrl-C at tfdist's terminal
is not its business), in ``/``, with nothing of tfdist's open but its stdin pipe (no lock,
no port, not tfdist's stdout/stderr, so a caller reading those sees their end when
tfdist's own end comes).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import tfdist
from tfdist.backends.yarn import rest
from tfdist.node import watchdog

#: Application states in which an application holds (or waits for) containers.
LIVE_STATES = rest.LIVE_STATES
#: Seconds after its owner died before an empty list of the run's applications is believed.
SETTLE = 3.0
#: Seconds after its owner died after which the reaper gives up and exits.
GIVE_UP = 120.0
#: Seconds each REST call may take, and between two rounds.
CALL_TIMEOUT = 5.0
ROUND = 1.0
#: What the RM records as each killed application's diagnostics.
DIAGNOSTICS = "killed by tfdist's reaper: the tfdist process that submitted it ended without its cleanup"
_APP_ID = re.compile(r"^application_\d{1,20}_\d{1,10}$")
#: The directory tfdist is imported from: the reaper's one entry on ``sys.path`` beyond the
#: standard library's (appended, so nothing there shadows a standard module).
_TFDIST_ROOT = str(Path(str(tfdist.__file__)).resolve().parent.parent)
#: The reaper's program: ``-c BOOT ROOT LOG TAG USER URL...``.
_BOOT = ("import sys; sys.path.append(sys.argv.pop(1)); "
         "from tfdist.backends.yarn import reaper; sys.exit(reaper.main(sys.argv[1:]))")


def doomed(apps: Iterable[Any], tag: str) -> list[str]:
    """The ids of the applications to kill: those in a live state that carry exactly ``tag``
    among their tags (YARN keeps tags lowercased, comma-separated). Never trusts the RM's
    own tag filter: an application of another run is spared even if the RM lists it."""
    want = tag.strip().lower()
    out = []
    for app in apps:
        if not isinstance(app, dict) or not want:
            continue
        app_id = str(app.get("id") or "")
        tags = {t.strip().lower() for t in str(app.get("applicationTags") or "").split(",")}
        if app.get("state") in LIVE_STATES and want in tags and _APP_ID.fullmatch(app_id):
            out.append(app_id)
    return sorted(set(out))


class RunApps(Protocol):
    """The two calls the reaper makes (:class:`RmRunApps` at a real RM)."""

    def apps(self, tag: str) -> list[Any]: ...

    def kill(self, app_id: str) -> None: ...


class RmRunApps:
    """The run's live applications at the RM and their kill, through tfdist's RM client."""

    def __init__(self, urls: list[str], user: str) -> None:
        self._rm = rest.ResourceManager(urls, timeout=CALL_TIMEOUT, user=user or None)

    def apps(self, tag: str) -> list[Any]:
        return self._rm.apps(tag, LIVE_STATES)

    def kill(self, app_id: str) -> None:
        self._rm.kill(app_id, DIAGNOSTICS)


def reap(rm: RunApps, tag: str, say: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> None:
    """Kill the run's live applications until none is listed (at least SETTLE seconds on) or
    GIVE_UP seconds have passed; ``say(line)`` records what happened."""
    began = clock()
    killed: set[str] = set()
    problem = ""
    while True:
        try:
            live = doomed(rm.apps(tag), tag)
            problem = ""
        except rest.RMError as err:
            live, problem = [], f"the ResourceManager does not answer ({err})"
        if not live and not problem and clock() - began >= SETTLE:
            say(f"none of this run's applications is live ({len(killed)} killed)")
            return
        for app_id in live:
            try:
                rm.kill(app_id)
                if app_id not in killed:
                    killed.add(app_id)
                    say(f"tfdist ended without its cleanup: killed {app_id} through the ResourceManager")
            except rest.RMError as err:
                problem = f"cannot kill {app_id} ({err})"
        if clock() - began >= GIVE_UP:
            say(f"gave up after {GIVE_UP:g}s: {problem or 'applications still live: ' + ', '.join(live)}")
            return
        sleep(ROUND)


def main(argv: list[str]) -> int:
    """``reaper.py LOG TAG USER URL...`` (LOG or USER may be empty): wait for ``exit`` or
    end-of-file on stdin; at end-of-file, reap."""
    log, tag, user, urls = argv[0], argv[1], argv[2], argv[3:]
    if watchdog.watch(lambda word: None):
        return 0

    def say(line: str) -> None:
        if log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            with contextlib.suppress(OSError), open(log, "a") as out:
                out.write(f"{stamp} reaper ({tag}): {line}\n")

    reap(RmRunApps(urls, user), tag, say)
    return 0


class Reaper:
    """The reaper of one run's applications, started before the first submission; say
    :meth:`close` after tfdist's own cleanup. It costs one small Python process that waits."""

    def __init__(self, tag: str, urls: list[str], user: str | None, log: Path | None = None) -> None:
        self.tag = tag
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _BOOT, _TFDIST_ROOT, str(log or ""), tag, user or "", *urls],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
            cwd="/", start_new_session=True,
        )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self, reap: bool = False) -> None:
        """tfdist's cleanup is done: the reaper exits without touching anything. With
        ``reap`` (that cleanup could not check or kill every application: the RM did not
        answer) it is left to reap as if tfdist had died, in the background, for at most
        :data:`GIVE_UP` seconds: what tfdist could not kill is still killed once the RM answers."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        watchdog.dismiss(proc, clean=not reap, wait=not reap)


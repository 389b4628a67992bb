"""The stdin watchdog (tfdist.node.watchdog) the guardian and both reapers wait with, and the
guardian's program built from its text: what ``exit`` and end-of-file each lead to."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from tfdist.node import guardian, watchdog


def test_words_until_exit_mean_nothing_to_do_and_end_of_file_means_the_owner_died() -> None:
    seen: list[str] = []
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert watchdog.watch(seen.append, io.StringIO("+1\n  @tok \nexit\n+2\n")) is True
        assert seen == ["+1", "@tok"]  # nothing after exit is read
        assert signal.getsignal(signal.SIGINT) == signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        seen.clear()
        assert watchdog.watch(seen.append, io.StringIO("+1\n\n-1")) is False
        assert seen == ["+1", "", "-1"]
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie (ours, not yet waited for) is dead
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _until(cond, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(cond())


@pytest.mark.parametrize("said_exit", [True, False])
def test_the_guardian_program_kills_the_told_group_only_when_its_owner_dies(said_exit: bool) -> None:
    """The guardian's program (the watchdog's source, then its own part) runs as a bare
    ``python -I -S -c``: told a group, it leaves it alone after ``exit`` and kills it at
    end-of-file."""
    task = subprocess.Popen(["sleep", "60"], start_new_session=True)
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", guardian.SOURCE], stdin=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None
        proc.stdin.write(f"+{task.pid}\n" + ("exit\n" if said_exit else ""))
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        if said_exit:
            assert _alive(task.pid)
        else:
            assert _until(lambda: not _alive(task.pid))
    finally:
        task.kill()
        task.wait()

"""procs.kill_marked: the sweep that ends processes which left their task's group (daemons)
finds exactly the processes carrying the run's token, and nothing with a longer token."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from tfdist.node import procs


def _sleeper(token: str | None, *, first: bool = False) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != procs.TOKEN_VAR}
    if token is not None:
        if first:  # the variable at the very start of the environment block
            env = {procs.TOKEN_VAR: token, **env}
        else:
            env[procs.TOKEN_VAR] = token
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)


def _until_execd(procs_: list[subprocess.Popen[bytes]]) -> None:
    """Each child has run its own program (before exec it has its parent's environment)."""
    deadline = time.monotonic() + 30
    for proc in procs_:
        while "time.sleep(60)" not in " ".join(psutil.Process(proc.pid).cmdline()):
            assert time.monotonic() < deadline, "a child never started its program"
            time.sleep(0.01)


def test_exactly_the_marked_processes_are_killed() -> None:
    run = f"run{os.getpid()}x{time.monotonic_ns()}"
    marked = [_sleeper(run), _sleeper(f"{run}/worker-0/1"), _sleeper(run, first=True)]
    spared = [_sleeper(f"{run}0"), _sleeper(f"{run}-other"), _sleeper(None), _sleeper(f"x{run}")]
    try:
        _until_execd(marked + spared)  # its environment is the one given from then on
        assert procs.kill_marked(run) == len(marked)
        for proc in marked:
            assert proc.wait(timeout=10) == -9
        assert all(proc.poll() is None for proc in spared)
    finally:
        for proc in marked + spared:
            proc.kill()
            proc.wait()

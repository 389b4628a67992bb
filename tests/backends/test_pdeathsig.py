"""A local task's parent-death signal set by the preloaded netguard library instead of an
exec of ``setpriv``: the task itself gets it, its children do not (as with setpriv), a task
whose parent died first kills itself, and programs the preload cannot reach keep setpriv."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import BIN, TFDIST, alive, still_alive
from tfdist.backends import netguard
from tfdist.backends.local import LocalBackend
from tfdist.jobspec import load
from tfdist.node.procs import PARENT_VAR, find_setpriv, spawn_options

# Prints its own parent-death signal, whether PARENT_VAR reached Python, then its child's signal.
REPORT = """
import ctypes, os, subprocess, sys
def pdeathsig():
    c = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(c), 0, 0, 0); return c.value
child = subprocess.run([sys.executable, "-c", sys.argv[1]], capture_output=True, text=True).stdout.strip()
print(pdeathsig(), "TFDIST_PARENT_PID" in os.environ, child, flush=True)
"""
CHILD = "import ctypes; c = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(c), 0, 0, 0); print(c.value)"


def run_task(library: str, parent: int, *, session: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LD_PRELOAD": library, PARENT_VAR: str(parent)}
    return subprocess.run([sys.executable, "-c", REPORT, CHILD], env=env, capture_output=True, text=True,
                          timeout=60, start_new_session=session)


def test_the_task_gets_the_signal_and_its_children_do_not(library: str) -> None:
    done = run_task(library, os.getpid())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(int(signal.SIGKILL)), "False", "0"]


def test_only_a_session_leader_acts_on_the_variable(library: str) -> None:
    """A descendant that copied the variable (not a task: tasks lead their own session) is
    left alone, whatever its parent."""
    done = run_task(library, os.getppid(), session=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "False", "0"]


def test_a_task_whose_parent_died_before_the_signal_was_armed_kills_itself(library: str) -> None:
    done = run_task(library, os.getppid())  # its real parent is this process: "tfdist" is gone
    assert done.returncode == -signal.SIGKILL and done.stdout == ""


# The owner of one task (no guardian), SIGKILLed by the test: the task's own die-with-parent.
OWNER = """
import os, sys, threading
from tfdist.node.procs import TaskProcess
env = dict(os.environ)
if sys.argv[2] == "preload":
    env["LD_PRELOAD"] = sys.argv[3]
TaskProcess([sys.executable, sys.argv[1]], env, None, token="t/worker-0",
            on_lines=lambda lines, when: print(*lines, flush=True), on_exit=lambda code, when: None,
            setpriv=None if sys.argv[2] == "preload" else sys.argv[3], preloaded=sys.argv[2] == "preload")
threading.Event().wait()
"""


@pytest.mark.parametrize("mode", ["preload", "setpriv"])
def test_sigkill_of_the_owner_kills_the_task_but_not_its_children(library: str, mode: str) -> None:
    """The same semantics either way: the task process dies with its owner; what it started
    does not (the guardian's job, absent here), so the preload changes nothing for them."""
    setpriv = find_setpriv()
    if mode == "setpriv" and setpriv is None:
        pytest.skip("util-linux's setpriv is not installed here")
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(BIN / "hang.py"), mode,
                              library if mode == "preload" else str(setpriv)],
                             stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    line = owner.stdout.readline().split()  # worker-0 pid N child M (TFDIST_TASK unset: None)
    task, child = int(line[2]), int(line[4])
    try:
        owner.kill()
        owner.wait(timeout=10)
        assert still_alive([task], 10) == []
        assert alive(child)
    finally:
        for pid in (task, child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        owner.stdout.close()


def test_local_tasks_get_the_signal_with_and_without_the_preload(tmp_path: Path) -> None:
    """Through tfdist: the preloaded library sets it, and setpriv does when ports are exposed."""
    for expose in ("0", "1"):
        env = {**os.environ, "TFDIST_EXPOSE_PORTS": expose}
        done = subprocess.run([*TFDIST, "run", "-q", "--runs-dir", str(tmp_path / expose), "--workers", "1",
                               "--evaluator", "--strategy", "none", "--", sys.executable, "-c", CHILD],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        logs = sorted((tmp_path / expose).glob("*/logs/*.log"))
        assert [p.stem for p in logs] == ["evaluator-0", "worker-0"]
        for log in logs:
            assert log.read_text().splitlines()[-1] == str(int(signal.SIGKILL)), (expose, log.stem)


# -- which programs the preload reaches ---------------------------------------------------------


def copy_head(tmp_path: Path, name: str) -> Path:
    """This interpreter's first 64 KiB: its ELF header and program headers, enough to judge."""
    dest = tmp_path / name
    with open(os.path.realpath(sys.executable), "rb") as src:
        dest.write_bytes(src.read(65536))
    dest.chmod(0o755)
    return dest


def patch(path: Path, offset: int, fmt: str, value: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into("<" + fmt, data, offset, value)
    path.write_bytes(bytes(data))


def test_preload_reaches_dynamic_programs_and_scripts_only(library: str, tmp_path: Path) -> None:
    python = os.path.realpath(sys.executable)
    assert netguard.preload_reaches(python, library)
    script = tmp_path / "train.sh"
    script.write_text(f"#!{python} -u\nprint(1)\n")
    assert netguard.preload_reaches(str(script), library)
    if shutil.which("env"):
        script.write_text("#!/usr/bin/env python3\n")
        assert netguard.preload_reaches(str(script), library) is os.path.exists("/usr/bin/env")
    loop = tmp_path / "loop.sh"
    loop.write_text(f"#!{loop}\n")  # the kernel gives up on endless interpreter chains too
    assert not netguard.preload_reaches(str(loop), library)
    (tmp_path / "plain.txt").write_text("echo hi\n")
    assert not netguard.preload_reaches(str(tmp_path / "plain.txt"), library)
    assert not netguard.preload_reaches(str(tmp_path / "missing"), library)
    assert not netguard.preload_reaches(str(tmp_path), library)


def test_static_setuid_and_foreign_binaries_keep_setpriv(library: str, tmp_path: Path) -> None:
    head = copy_head(tmp_path, "dynamic")
    assert netguard.preload_reaches(str(head), library)
    with open(head, "rb") as handle:
        kind = netguard.elf_kind(handle)
    assert kind is not None and kind[1] and kind[0][0] == 2, "these offsets assume a 64-bit little-endian ELF"
    data = head.read_bytes()
    phoff, = struct.unpack_from("<Q", data, 32)
    entsize, count = struct.unpack_from("<HH", data, 54)
    static = copy_head(tmp_path, "static")
    for i in range(count):  # PT_INTERP -> PT_NULL: what a static binary looks like to the check
        if struct.unpack_from("<I", data, phoff + i * entsize)[0] == 3:
            patch(static, phoff + i * entsize, "I", 0)
    assert not netguard.preload_reaches(str(static), library)
    foreign = copy_head(tmp_path, "foreign")
    patch(foreign, 18, "H", 0xB7 if kind[0][2] != 0xB7 else 0x3E)  # aarch64 (or x86-64)
    assert not netguard.preload_reaches(str(foreign), library)
    setuid = copy_head(tmp_path, "setuid")
    setuid.chmod(0o755 | stat.S_ISUID)
    assert not netguard.preload_reaches(str(setuid), library)


def test_the_backend_looks_a_program_up_once_and_honours_the_opt_out(library: str, tmp_path: Path) -> None:
    python = os.path.realpath(sys.executable)
    name = os.path.basename(python)
    job = load.from_dict({"name": "p", "workdir": str(tmp_path), "command": [name], "roles": {"worker": 1}})
    backend = LocalBackend(job)
    try:
        backend._netguard = netguard.NetGuard(library)
        env = {"PATH": os.path.dirname(python), "LD_PRELOAD": f"{library}:/x/mine.so"}
        assert backend._spawn_plan(name, env) == (python, True) == backend._spawn_plan(name, env)
        assert list(backend._plans) == [(name, env["PATH"])]
        assert backend._spawn_plan(name, {"PATH": env["PATH"]}) == (python, False)  # not preloaded: setpriv
        assert backend._spawn_plan("no-such-program", env) == (None, False)
        assert backend._spawn_plan("rel/prog", env) == (str(tmp_path / "rel/prog"), False)  # not there
        backend._netguard = netguard.NetGuard(None)
        assert backend._spawn_plan(name, env) == (python, False)
    finally:
        backend.close()


def test_spawn_options_exec_the_found_program_or_go_through_setpriv() -> None:
    assert spawn_options(["sh", "t.sh"], "/bin/setpriv", True, "/bin/sh") == (["sh", "t.sh"], {"executable": "/bin/sh"})
    assert spawn_options(["sh"], "/bin/setpriv", False, "/bin/sh") == (
        ["/bin/setpriv", "--pdeathsig", "KILL", "--", "sh"], {})
    argv, extra = spawn_options(["sh"], None, False, "/bin/sh")
    assert argv == ["sh"] and extra["executable"] == "/bin/sh" and callable(extra["preexec_fn"])
    assert spawn_options(["sh"], None, True) == (["sh"], {})


def test_a_task_script_runs_the_same_through_the_preload(library: str, tmp_path: Path) -> None:
    """A shell script task (exec chain: sh, then the program it execs) keeps the signal."""
    script = tmp_path / "task.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        exec {sys.executable} -c '{CHILD}'
        """))
    script.chmod(0o755)
    env = {**os.environ, "LD_PRELOAD": library, PARENT_VAR: str(os.getpid())}
    done = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60,
                          start_new_session=True)
    assert done.returncode == 0 and done.stdout.strip() == str(int(signal.SIGKILL)), done.stderr


def test_the_parent_pid_goes_only_to_a_preloaded_task() -> None:
    """A stale TFDIST_PARENT_PID inherited by tfdist never reaches a task started another way."""
    from tfdist.node.procs import TaskProcess

    seen: dict[bool, list[str]] = {}
    for preloaded in (False, True):
        lines: list[str] = []
        proc = TaskProcess([sys.executable, "-c", f"import os; print(os.environ.get({PARENT_VAR!r}))"],
                           {**os.environ, PARENT_VAR: "1"}, None, token="t/worker-0",
                           on_lines=lambda got, when, out=lines: out.extend(got), on_exit=lambda code, when: None,
                           setpriv=None, preloaded=preloaded)  # no library here: Python sees the variable
        assert proc.done.wait(60)
        seen[preloaded] = lines
    assert seen == {False: ["None"], True: [str(os.getpid())]}

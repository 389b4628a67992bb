"""The program MultiWorkerMirrored chief/worker scripts run through (tfdist.node.leave_program):
which commands are rewritten and how, that a script runs as ``python SCRIPT`` would run it
(argv, ``__main__``, ``sys.path[0]``, exit codes, tracebacks) with no TensorFlow present, and
the exit rendezvous against a fake key-value store. No TensorFlow process starts here (the
real rendezvous: tests/examples/test_peers.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tfdist.node import leave_program as lp

MWMS = "multi_worker_mirrored"


def test_python_scripts_and_modules_of_mwms_chief_and_workers_are_rewritten() -> None:
    leave = lp.plan(["python", "train.py", "--x", "1"], MWMS, "worker", 30)
    assert leave == {"seconds": 30.0, "file": lp.PROGRAM}
    assert lp.launch(["python", "train.py", "--x", "1"], leave) == ["python", lp.PROGRAM, "30", "train.py", "--x", "1"]
    assert lp.launch(["/venv/bin/python3.11", "-m", "pkg.train", "-v"], leave) == [
        "/venv/bin/python3.11", lp.PROGRAM, "30", "-m", "pkg.train", "-v"]
    assert lp.plan(["python3", "t.py"], MWMS, "chief", 2.5, "node") == {"seconds": 2.5}
    shipped = lp.plan(["python3", "t.py"], MWMS, "chief", 2.5, "source")
    assert shipped is not None and shipped["source"] == Path(lp.PROGRAM).read_text()
    assert lp.launch(["python3", "t.py", "a"], shipped) == ["python3", "-c", shipped["source"], "2.5", "t.py", "a"]
    # "node": the node reads the program from its own copy of the package
    assert lp.launch(["python3", "t.py"], {"seconds": 1}) == ["python3", "-c", lp.program_source(), "1", "t.py"]


def test_other_commands_strategies_and_roles_run_as_they_are() -> None:
    for command in (["python"], ["python", "-u", "t.py"], ["python", "-c", "print(1)"], ["bash", "t.py"],
                    ["python", "-m"], ["python", "-m", "-x"], ["pythonista", "t.py"], ["./train.sh"], []):
        assert lp.plan(command, MWMS, "worker", 30) is None, command
        assert lp.launch(command, {"seconds": 30, "file": lp.PROGRAM}) == command
    for strategy in ("parameter_server", "mirrored", "none"):
        assert lp.plan(["python", "t.py"], strategy, "worker", 30) is None
    for role in ("ps", "evaluator"):
        assert lp.plan(["python", "t.py"], MWMS, role, 30) is None
    assert lp.launch(["python", "t.py"], None) == ["python", "t.py"]


def _run(tmp_path: Path, script: str, *args: str, carry: str = "file",
         module: bool = False) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pkg").mkdir(exist_ok=True)
    target = tmp_path / "pkg" / "job.py"
    target.write_text(textwrap.dedent(script))
    command = [sys.executable, "-m", "pkg.job", *args] if module else [sys.executable, "pkg/job.py", *args]
    leave = lp.plan(command, MWMS, "worker", 5, carry)
    argv = lp.launch(command, leave)
    assert argv != command
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)


SHOW = """\
    import os, sys
    print("name", __name__, "argv", sys.argv[1:], "path0", sys.path[0], "file", os.path.basename(__file__))
"""


@pytest.mark.parametrize("carry", ["file", "source"])
def test_a_script_runs_as_main_with_its_argv_and_path(tmp_path: Path, carry: str) -> None:
    done = _run(tmp_path, SHOW, "--x", "1", carry=carry)
    assert done.returncode == 0, done.stderr
    assert f"name __main__ argv ['--x', '1'] path0 {tmp_path / 'pkg'} file job.py" in done.stdout
    assert "tfdist" not in done.stderr  # no coordination service (no TensorFlow): it just leaves


def test_a_module_runs_as_main_with_the_directory_on_the_path(tmp_path: Path) -> None:
    done = _run(tmp_path, SHOW, "-v", module=True)
    assert done.returncode == 0, done.stderr
    assert f"name __main__ argv ['-v'] path0 {tmp_path} file job.py" in done.stdout


@pytest.mark.parametrize(("ending", "code"), [("sys.exit(0)", 0), ("sys.exit()", 0), ("sys.exit(3)", 3),
                                              ("sys.exit(False)", 0), ("os._exit(4)", 4)])
def test_the_script_s_exit_code_is_the_task_s(tmp_path: Path, ending: str, code: int) -> None:
    done = _run(tmp_path, f"import os, sys, atexit\natexit.register(print, 'atexit ran')\n{ending}\n")
    assert done.returncode == code, done.stderr
    assert ("atexit ran" in done.stdout) == (ending != "os._exit(4)")


def test_a_message_exit_prints_it_and_exits_1(tmp_path: Path) -> None:
    done = _run(tmp_path, "import sys\nsys.exit('no data here')\n")
    assert done.returncode == 1
    assert done.stderr.strip() == "no data here"


@pytest.mark.parametrize("carry", ["file", "source"])
def test_an_exception_keeps_the_script_s_traceback_and_exits_1(tmp_path: Path, carry: str) -> None:
    script = "import atexit\natexit.register(print, 'atexit ran')\ndef f():\n    raise ValueError('bad shape')\nf()\n"
    done = _run(tmp_path, script, carry=carry)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "pkg/job.py" in lines[1] and "<module>" in lines[1], lines  # the script's frame first
    assert "leave_program" not in done.stderr and "runpy" not in done.stderr and "<string>" not in done.stderr
    assert lines[-1] == "ValueError: bad shape"
    assert "atexit ran" in done.stdout


class FakeStore:
    """The coordination service's key-value store as leave_together uses it."""

    class DeadlineExceededError(Exception):
        pass

    class UnavailableError(Exception):
        pass

    def __init__(self, gone: bool = False) -> None:
        self.values: dict[str, str] = {}
        self.cond = threading.Condition()
        self.gone = gone

    def set_config_key_value(self, key: str, value: str) -> None:
        with self.cond:
            self.values[key] = value
            self.cond.notify_all()

    def get_config_key_value(self, key: str, timeout_in_ms: int) -> str:
        if self.gone:
            raise self.UnavailableError("Failed to send RPC to coordination service\nmore")
        with self.cond:
            if not self.cond.wait_for(lambda: key in self.values, timeout_in_ms / 1000):
                raise self.DeadlineExceededError("timed out")
            return self.values[key]


def tf_config(index: int, chief: bool = False) -> str:
    chief_part = '"chief": ["h:0"], ' if chief else ""
    return (f'{{"cluster": {{{chief_part}"worker": ["h:1", "h:2"], "ps": ["h:3"]}}, '
            f'"task": {{"type": "{"chief" if chief and index < 0 else "worker"}", "index": {max(index, 0)}}}}}')


def test_every_task_waits_for_every_peer_of_chief_and_workers(capsys: pytest.CaptureFixture[str]) -> None:
    store = FakeStore()
    results: dict[str, list[str] | None] = {}

    def leave(name: str, config: str) -> None:
        results[name] = lp.leave_together(10, store, config)

    threads = {name: threading.Thread(target=leave, args=(name, config)) for name, config in
               (("chief", tf_config(-1, chief=True)), ("worker-1", tf_config(1, chief=True)),
                ("worker-0", tf_config(0, chief=True)))}
    threads["chief"].start()
    threads["worker-1"].start()
    time.sleep(0.3)
    # the chief (the service's host) and worker-1 wait for worker-0; the ps is not coordinated
    assert threads["chief"].is_alive() and threads["worker-1"].is_alive()
    assert set(store.values) == {"tfdist/left/chief/0", "tfdist/left/worker/1"}
    threads["worker-0"].start()
    for thread in threads.values():
        thread.join(5)
    assert results == {"chief": [], "worker-0": [], "worker-1": []}
    assert set(store.values) == {"tfdist/left/chief/0", "tfdist/left/worker/0", "tfdist/left/worker/1"}
    assert "chief-0 left with its peers" in capsys.readouterr().err


def test_the_wait_is_bounded_and_a_gone_service_ends_it(capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    assert lp.leave_together(0.3, FakeStore(), tf_config(0)) == ["worker-1"]
    assert 0.25 < time.monotonic() - start < 3
    assert "not heard from: worker-1" in capsys.readouterr().err
    assert lp.leave_together(30, FakeStore(gone=True), tf_config(1)) == ["worker-0"]
    assert "UnavailableError: Failed to send RPC" in capsys.readouterr().err


def test_without_a_coordination_service_or_a_cluster_it_leaves_at_once() -> None:
    assert lp.leave_together(30) is None  # this process has no TensorFlow context
    assert lp.leave_together(30, FakeStore(), '{"cluster": {"ps": ["h:3"]}, "task": {"type": "ps", "index": 0}}') is None
    assert lp.leave_together(30, FakeStore(), "not json") is None


#: A script that stands in for one that made a MultiWorkerMirroredStrategy: it puts a fake
#: ``tensorflow.python.eager.context`` with a coordination service into sys.modules (where
#: the program looks; it never imports TensorFlow) and prints what is set in its store.
FAKE_TF = """\
import sys, types
class Context:
    coordination_service = "configured"
    _initialized = True
    values = {"tfdist/left/worker/1": "left"}  # its peer, worker-1, has left already
    def set_config_key_value(self, key, value):
        print("set", key, value, flush=True)
        self.values[key] = value
    def get_config_key_value(self, key, timeout_in_ms):
        return self.values[key]
module = types.ModuleType("tensorflow.python.eager.context")
module.context = lambda: Context()
sys.modules["tensorflow.python.eager.context"] = module
sys.modules["tensorflow"] = types.ModuleType("tensorflow")
print("trained", flush=True)
"""
TWO_WORKERS = '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}'


@pytest.mark.parametrize("carry", ["file", "source"])
def test_with_a_coordination_service_the_task_says_it_left_then_exits(tmp_path: Path, carry: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", TWO_WORKERS)
    done = _run(tmp_path, FAKE_TF, carry=carry)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["trained", "set tfdist/left/worker/0 left"]
    assert done.stderr.strip() == "tfdist: worker-0 left with its peers (waited 0.0s for 1)"
    failing = _run(tmp_path, FAKE_TF + "sys.exit(5)\n", carry=carry)
    # a failure is not held, and its peers learn of it
    assert failing.returncode == 5 and failing.stdout.splitlines() == ["trained", "set tfdist/left/worker/0 failed 5"]
    assert "left with its peers" not in failing.stderr
    raising = _run(tmp_path, FAKE_TF + "raise ValueError('late')\n", carry=carry)
    assert raising.returncode == 1 and raising.stdout.splitlines()[-1] == "set tfdist/left/worker/0 failed 1"
    assert raising.stderr.strip().splitlines()[-1] == "ValueError: late"


@pytest.mark.parametrize("carry", ["file", "node"])
def test_a_warm_spare_runs_its_task_through_the_program(tmp_path: Path, carry: str) -> None:
    """A restart handed to a warm spare (tfdist.node.spares) leaves with its peers as a cold
    start does: the handover carries the plan, and the spare program runs the leave program
    (from its file, or from the text the pool fills in for a ``node`` plan)."""
    import os

    from tfdist.node import spares
    from tfdist.node.procs import TaskProcess

    (tmp_path / "job.py").write_text(FAKE_TF)
    command = [sys.executable, "job.py"]
    handover = spares.plan(command, str(tmp_path))
    assert handover is not None
    leave = lp.plan(command, MWMS, "worker", 5, carry)
    handover = spares.Handover(handover.argv, handover.script_dir, leave)
    env = {"PATH": os.environ["PATH"], "TF_CONFIG": TWO_WORKERS, "TFDIST_RESTART_COUNT": "0"}
    pool = spares.SparePool()
    ready = threading.Event()
    lines: list[str] = []
    ended = threading.Event()

    def make(argv: list[str], env: dict, sink: spares.Sink) -> TaskProcess:
        return TaskProcess(argv, env, str(tmp_path), token=f"t-{os.getpid()}/leave", on_lines=sink.lines,
                           on_exit=sink.exit, on_active=sink.active, setpriv=None, stdin_pipe=True)

    try:
        pool.want("worker-0", spares.spare_command(sys.executable, handover, []), env, make,
                  lambda pid: ready.set())
        pool.fill()
        assert ready.wait(30)
        proc, why = pool.take("worker-0", env, lambda got, when: lines.extend(got),
                              lambda code, when: ended.set(), lambda when: None, handover, str(tmp_path))
        assert proc is not None, why
        assert ended.wait(30)
        assert proc.exit_code == 0, lines
    finally:
        pool.close()
    assert "set tfdist/left/worker/0 left" in lines, lines
    assert "tfdist: worker-0 left with its peers (waited 0.0s for 1)" in lines, lines


def test_a_yarn_container_reads_the_program_from_the_shipped_zip(tmp_path: Path) -> None:
    """YARN's plan carries no text (the container's environment is small): the agent finds the
    program in the node package's zip it runs from (tfdist.backends.agent.ship)."""
    from tfdist.backends.agent import ship

    (tmp_path / "node.zip").write_bytes(ship.build())
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from tfdist.node import leave_program as lp; "
             "assert lp.__file__.startswith(sys.argv[1]), lp.__file__; "
             "print(lp.launch(['python', 't.py'], lp.plan(['python', 't.py'], "
             "'multi_worker_mirrored', 'worker', 7, 'node'))[2])")
    done = subprocess.run([sys.executable, "-I", "-c", probe, str(tmp_path / "node.zip")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip("\n") == Path(lp.PROGRAM).read_text().rstrip("\n")


def test_a_one_task_cluster_has_nobody_to_wait_for(capsys: pytest.CaptureFixture[str]) -> None:
    store = FakeStore()
    one = '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}'
    assert lp.leave_together(30, store, one) == []
    assert store.values == {} and capsys.readouterr().err == ""


def test_a_peer_that_failed_ends_the_wait_for_it(capsys: pytest.CaptureFixture[str]) -> None:
    store = FakeStore()
    assert lp.tell_failed(1, store, tf_config(1)) is True
    start = time.monotonic()
    assert lp.leave_together(30, store, tf_config(0)) == []
    assert time.monotonic() - start < 5
    assert "worker-0 left with its peers (waited 0.0s for 1; failed: worker-1)" in capsys.readouterr().err


def test_telling_a_failure_to_a_service_that_hangs_is_bounded() -> None:
    class Hanging(FakeStore):
        def set_config_key_value(self, key: str, value: str) -> None:
            threading.Event().wait(3)

    start = time.monotonic()
    assert lp.tell_failed(3, Hanging(), tf_config(1), bound=0.3) is False
    assert time.monotonic() - start < 5
    assert lp.tell_failed(3, FakeStore(), '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}') is False

"""Warm spares on the local backend (restart.warm_spares): what a spare hands over and how it
fails. The pure parts first (milliseconds), then real jobs: a spare becomes the restarted task
with the task's TF_CONFIG, argv, cwd and restart count (TensorFlow already imported); a spare
that died is replaced by a cold start that says so; a spare never outlives tfdist."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import TFDIST, alive, tfdist
from tfdist.backends.netguard import prepare
from tfdist.node import spares
from tfdist.node.spare_program import READY

TASK = Path(__file__).with_name("spare_task.py")
WARM = "restart={policy: on-failure, max_restarts: 1, backoff_seconds: 0, warm_spares: true}"


def test_only_python_scripts_and_modules_can_be_handed_over() -> None:
    assert spares.plan(["python", "train.py", "--x", "1"], "/job") == spares.Handover(
        ("train.py", "--x", "1"), "/job")
    assert spares.plan(["/venv/bin/python3.11", "/abs/t.py"], "/job") == spares.Handover(("/abs/t.py",), "/abs")
    assert spares.plan(["python", "-m", "pkg.train", "-v"], "/job") == spares.Handover(
        ("-m", "pkg.train", "-v"), "/job")
    for command in (["python"], ["python", "-u", "t.py"], ["python", "-c", "print(1)"], ["bash", "t.py"],
                    ["python", "-m"], ["python", "notes.txt"], ["pythonista", "t.py"]):
        assert spares.plan(command, "/job") is None, command


def test_a_script_s_imports_tensorflow_first_and_only_absolute_ones() -> None:
    source = ("import numpy as np, os.path\nfrom tf_keras import layers\nfrom . import local\n"
              "def f():\n    import sklearn.datasets\n")
    assert spares.imports_of(source) == ["tensorflow", "numpy", "os", "tf_keras", "sklearn"]
    assert spares.imports_of("def (:") == ["tensorflow"]


def test_a_script_that_imports_tfdist_runtime_has_it_before_tensorflow() -> None:
    """So TensorFlow's import in the spare is the cheaper one the runtime makes
    (tfdist.node.import_gc), as it would be in the script."""
    for source in ("from tfdist import runtime\nimport tensorflow as tf\n", "import tfdist.runtime\n",
                   "from tfdist.runtime import sync\n"):
        assert spares.imports_of(source) == ["tfdist.runtime", "tensorflow", "tfdist"], source
    assert spares.imports_of("from tfdist import cli\nimport tfdist\n") == ["tensorflow", "tfdist"]


def test_only_the_restart_count_may_change_between_the_spare_and_its_task() -> None:
    env = {"TF_CONFIG": "{}", "TFDIST_RESTART_COUNT": "0"}
    assert spares.same_environment(env, {**env, "TFDIST_RESTART_COUNT": "3"})
    assert not spares.same_environment(env, {**env, "TF_CONFIG": '{"a": 1}'})
    assert not spares.same_environment(env, {**env, "NEW": "1"})


def test_the_sink_drops_import_noise_then_passes_the_task_s_output() -> None:
    got: list[str] = []
    deaths: list[int] = []
    sink = spares.Sink(deaths.append)
    sink.lines(["oneDNN custom operations are on"], 1.0)
    sink.attach(lambda lines, when: got.extend(lines), lambda code, when: got.append(f"exit {code}"),
                lambda when: None)
    sink.lines(["more noise", READY, "hello"], 2.0)
    sink.lines(["world"], 3.0)
    sink.exit(0, 4.0)
    assert got == ["hello", "world", "exit 0"] and not deaths
    idle = spares.Sink(deaths.append)
    idle.exit(-9, 1.0)
    assert deaths == [-9]


def run(tmp_path: Path, *args: str) -> tuple[dict, dict[int, dict]]:
    proc = tfdist("run", "-q", "--json", "--runs-dir", str(tmp_path), "--set", WARM, *args, timeout=300)
    result = json.loads(proc.stdout)
    log = Path(result["run_dir"], "logs", "worker-0.log").read_text()
    seen: dict[int, dict] = {}
    attempt = 0
    for line in log.splitlines():
        if " attempt " in line and line.startswith("--- tfdist:"):
            attempt = int(line.split(" attempt ")[1].split()[0])
        elif line.startswith("SEEN "):
            seen[attempt] = json.loads(line[5:])
    return result | {"log": log}, seen


@pytest.mark.integration
def test_a_spare_becomes_the_restarted_task(tmp_path: Path) -> None:
    result, seen = run(tmp_path, "--workers", "1", "--", "python", str(TASK), "--tf")
    assert result["state"] == "succeeded", result["log"]
    cold, warm = seen[0], seen[1]
    assert not cold["pre_imported"] and warm["pre_imported"], result["log"]
    # the spare imported tfdist.runtime before TensorFlow, as the script does: frozen alike
    assert cold["frozen"] > 100_000 and warm["frozen"] > 100_000, (cold["frozen"], warm["frozen"])
    spare = int(result["log"].split("SPARE ")[1].split()[0])
    assert warm["pid"] == spare and "no warm spare" not in result["log"]
    assert warm["tf_task"] == ["worker", 0] and warm["tf_cluster"] == cold["tf_cluster"]
    assert (warm["restart_count"], warm["c_restart_count"]) == ("1", "1")  # Python's and C's
    assert warm["argv"] == cold["argv"] and warm["cwd"] == cold["cwd"] and warm["name"] == "__main__"
    assert warm["interposer"] == cold["interposer"]  # the spare was started with the preload
    if prepare({}).library:  # the interposer can be built here: both had it
        assert cold["interposer"]
    assert "TFDIST_SPARE_READY" not in result["log"]


@pytest.mark.integration
def test_a_spare_that_died_is_replaced_by_a_cold_start_that_says_so(tmp_path: Path) -> None:
    result, seen = run(tmp_path, "--workers", "1", "--", "python", str(TASK), "--first", "kill-spare")
    assert result["state"] == "succeeded", result["log"]
    assert "no warm spare for worker-0 (its spare exited (killed by SIGKILL)); starting cold" in result["log"]
    assert seen[1]["pid"] != int(result["log"].split("SPARE ")[1].split()[0])
    assert not seen[1]["pre_imported"]


@pytest.mark.integration
def test_a_spare_never_outlives_tfdist(tmp_path: Path) -> None:
    cmd = [*TFDIST, "run", "-q", "--runs-dir", str(tmp_path), "--set", WARM, "--workers", "1", "--",
           "python", str(TASK), "--first", "hang"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        pid = None
        while pid is None and time.monotonic() < deadline:
            logs = list(tmp_path.glob("*/logs/worker-0.log"))
            text = logs[0].read_text() if logs else ""
            if "SPARE " in text:
                pid = int(text.split("SPARE ")[1].split()[0])
            time.sleep(0.1)
        assert pid is not None and alive(pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        end = time.monotonic() + 10
        while alive(pid) and time.monotonic() < end:
            time.sleep(0.05)
        assert not alive(pid), "the spare outlived tfdist"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


WAITER = ["-c", "import sys; print('noise'); print('TFDIST_SPARE_READY', flush=True); "
          "line = sys.stdin.readline(); print('became', line.strip()[:20], flush=True)"]


def _pool_with(tmp_path: Path) -> tuple[spares.SparePool, list[tuple[str, int]], spares.Maker]:
    import sys

    from tfdist.node.procs import TaskProcess

    pool = spares.SparePool()
    ready: list[tuple[str, int]] = []

    def make(argv: list[str], env: dict, sink: spares.Sink) -> TaskProcess:
        return TaskProcess([sys.executable, *WAITER], env, str(tmp_path), token=f"t-{os.getpid()}/w",
                           on_lines=sink.lines, on_exit=sink.exit, on_active=sink.active,
                           setpriv=None, stdin_pipe=True)

    env = {"PATH": os.environ["PATH"], "TFDIST_RESTART_COUNT": "0"}
    for name in ("w0", "w1"):
        pool.want(name, ["unused"], env, make, lambda pid, n=name: ready.append((n, pid)))
    return pool, ready, make


def _until(predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not predicate() and time.monotonic() < end:
        time.sleep(0.01)


def test_the_pool_fills_on_the_first_report_and_hands_over_or_says_why_not(tmp_path: Path) -> None:
    pool, ready, make = _pool_with(tmp_path)
    try:
        assert pool.idle() == {}  # nothing before training reports
        time.sleep(0.5)  # the job's "start-up": its start to its first report
        pool.fill()
        _until(lambda: len(ready) == 2)
        assert sorted(n for n, _ in ready) == ["w0", "w1"] and set(pool.ready()) == {"w0", "w1"}
        got: list[str] = []
        handover = spares.Handover(("train.py",), str(tmp_path))
        env = {"PATH": os.environ["PATH"], "TFDIST_RESTART_COUNT": "1"}
        proc, why = pool.take("w0", env, lambda lines, when: got.extend(lines), lambda c, w: None,
                              lambda w: None, handover, str(tmp_path))
        assert proc is not None and why == ""
        _until(lambda: bool(got))
        assert got == ['became {"argv": ["train.py"']  # the import noise never reached the task
        changed = {**env, "NEW": "1"}
        proc, why = pool.take("w1", changed, lambda lines, when: None, lambda c, w: None,
                              lambda w: None, handover, str(tmp_path))
        assert proc is None and why == "the task's environment changed since its spare started"
        proc, why = pool.take("w1", env, lambda lines, when: None, lambda c, w: None, lambda w: None,
                              handover, str(tmp_path))
        assert proc is None and why == "no spare was ready yet"
        env0 = {"PATH": os.environ["PATH"], "TFDIST_RESTART_COUNT": "0"}
        for name in ("w0", "w1"):  # both restart (cold and warm): their next spares wait
            pool.want(name, ["unused"], env0, make)
        assert pool.fill() == []  # what fill decides, not what a short sleep happened to show
        assert pool.idle() == {}
        queued: list[str] = []  # a start-up's time later (at least 0.5 s) both are due, once each
        _until(lambda: bool(queued.extend(pool.fill())) or sorted(queued) == ["w0", "w1"])
        assert sorted(queued) == ["w0", "w1"]
        _until(lambda: len(pool.idle()) == 2)
        assert set(pool.idle()) == {"w0", "w1"}
    finally:
        pool.close()
    assert pool.idle() == {}

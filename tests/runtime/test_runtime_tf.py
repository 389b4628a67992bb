"""The runtime with real TensorFlow, each case in its own process (TF state is global)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tfdist.backends.base import progress_data
from tfdist.node.procs import PortHolder

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"


@pytest.fixture
def free_port():
    """Reserve loopback ports held (SO_REUSEPORT) until the test ends, as tfdist does:
    no other process can take one between this choice and TensorFlow's bind."""
    with PortHolder() as holder:
        yield holder.reserve


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "TFDIST_"))}
    env.update(
        TF_USE_LEGACY_KERAS="1",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
        TFDIST_RUN_DIR=str(tmp_path / "run"),
        TMPDIR=str(tmp_path),
        TF_GRPC_REUSE_PORT="1",  # TensorFlow binds the ports the test holds (free_port)
    )
    env.update(extra)
    return env


def run_python(code: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def reports(output: str) -> list[dict]:
    return [r for r in map(progress_data, output.splitlines()) if r is not None]


def test_strategy_after_tensorflow_ops_says_what_to_do(tmp_path, free_port):
    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    env = env_for(tmp_path, TF_CONFIG=tf_config, TFDIST_STRATEGY="multi_worker_mirrored")
    out = run_python(
        """
        import tensorflow as tf
        from tfdist import runtime
        tf.constant(1.0)  # too early
        try:
            runtime.strategy()
        except runtime.StrategyOrderError as err:
            print("ORDER:", err)
        """,
        env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ORDER: tfdist.runtime.strategy() must be called before any other TensorFlow" in out.stdout


def test_parameter_server_task_serves_until_sigterm_then_exits_143(tmp_path, free_port):
    ports = [free_port() for _ in range(3)]
    cluster = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "worker": [f"127.0.0.1:{ports[1]}"],
        "ps": [f"127.0.0.1:{ports[2]}"],
    }
    tf_config = json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}})
    env = env_for(tmp_path, TF_CONFIG=tf_config, TFDIST_STRATEGY="parameter_server")
    # a thread of the task itself counts the time it has had: "still serving after 10 of its
    # ticks" holds however slow the machine is (a wall-clock sleep would pass on a loaded
    # machine even if strategy() returned, before the return got its turn)
    code = ("import threading, time\n"
            "def tick():\n"
            "    for n in range(1, 1000000):\n"
            "        time.sleep(0.1)\n"
            "        print(f'tick {n}', flush=True)\n"
            "threading.Thread(target=tick, daemon=True).start()\n"
            "from tfdist import runtime\nruntime.strategy()\nprint('RETURNED', flush=True)\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        seen = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            seen.append(line)
            if "serving at" in line or not line:
                break
        assert any(f"ps-0 serving at grpc://127.0.0.1:{ports[2]}" in s for s in seen), seen[-20:]
        ticks = 0
        while ticks < 10:  # ten of the task's own ticks after it began to serve
            line = proc.stdout.readline()
            seen.append(line)
            assert line and "RETURNED" not in line, seen[-20:]  # a server never returns nor exits
            ticks += line.startswith("tick ")
        assert proc.poll() is None  # blocks, as a server must
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM  # retryable, never a success
    assert "ps-0 stopping" in rest and "RETURNED" not in rest


def test_multi_worker_task_exits_promptly_on_sigterm(tmp_path, free_port):
    """TF's coordination service swallows SIGTERM; the runtime makes it end the task."""
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    code = (
        "import time\nfrom tfdist import runtime\nruntime.strategy()\n"
        "print('ready', flush=True)\ntime.sleep(300)\n"
    )
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        env = env_for(tmp_path, TF_CONFIG=tf_config, TFDIST_STRATEGY="multi_worker_mirrored")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        start = time.monotonic()
        procs[0].send_signal(signal.SIGTERM)
        out, _ = procs[0].communicate(timeout=15)
        assert procs[0].returncode == 128 + signal.SIGTERM
        assert "worker-0 got SIGTERM, exiting" in out
        assert time.monotonic() - start < 15
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_callbacks_then_sidecar_evaluator_in_one_process(tmp_path):
    """fit with the job's callbacks writes checkpoints and the marker; the evaluator
    evaluates the last checkpoint and returns instead of waiting."""
    out = run_python(
        """
        from tfdist import runtime
        strategy = runtime.strategy()
        import digits_data, tensorflow as tf, tf_keras
        x, y, xt, yt = digits_data.load()
        with strategy.scope():
            model = digits_data.dense_model(tf_keras)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
        model.fit(ds, epochs=2, steps_per_epoch=20, verbose=0, callbacks=runtime.callbacks(batch_size=64))
        ctx = runtime.context()
        print("MARKER", ctx.dirs.done_marker.read_text().strip())
        fresh = digits_data.dense_model(tf_keras)
        test = tf.data.Dataset.from_tensor_slices((xt, yt)).batch(128)
        metrics = runtime.run_sidecar_evaluator(fresh, test, idle_timeout=30)
        print("EVAL", metrics["accuracy"])
        """,
        env_for(tmp_path),
        cwd=DIGITS,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = reports(out.stdout)
    training = [r for r in found if not r.get("evaluation") and ("epoch" in r or r.get("final"))]  # no step reports
    evaluations = [r for r in found if r.get("evaluation")]
    assert [r["epoch"] for r in training if not r["final"]] == [1, 2]
    assert training[-1]["final"] is True and training[-1]["metrics"]["accuracy"] > 0.6
    assert all(r["examples_per_sec"] > 0 for r in training if not r["final"])
    # a plain run evaluates only the latest checkpoint, then sees the marker and stops
    assert [r.get("checkpoint") for r in evaluations] == ["ckpt-002", "ckpt-002"]
    assert evaluations[-1]["final"] is True and "gave_up" not in evaluations[-1]
    marker = next(line for line in out.stdout.splitlines() if line.startswith("MARKER"))
    assert marker.endswith("checkpoints/ckpt-002")
    evaluated = float(next(x for x in out.stdout.splitlines() if x.startswith("EVAL")).split()[1])
    assert evaluated > 0.6  # the weights were restored: an untrained model scores ~0.1
    assert not (tmp_path / "run" / "backup" / "chief").exists()


def test_evaluator_gives_up_without_checkpoints(tmp_path):
    out = run_python(
        """
        import time
        from tfdist import runtime
        runtime.strategy()
        import tf_keras
        model = tf_keras.Sequential([tf_keras.layers.Dense(1)])
        start = time.monotonic()
        runtime.run_sidecar_evaluator(model, None, idle_timeout=1.0, poll_seconds=0.1)
        print("WAITED", time.monotonic() - start)
        """,
        env_for(tmp_path, TF_CONFIG=json.dumps({"cluster": {}, "task": {"type": "evaluator", "index": 0}})),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (final,) = reports(out.stdout)
    assert final["final"] is True and final["gave_up"] is True
    waited = float(next(x for x in out.stdout.splitlines() if x.startswith("WAITED")).split()[1])
    assert 1.0 <= waited < 30


@pytest.mark.parametrize(
    ("script", "strategy"),
    [
        ("train_custom_loop.py", None),
        ("train_pss_fit.py", "parameter_server"),  # DatasetCreator on the default strategy
        ("train_pss_coordinator.py", "parameter_server"),  # Loop without a coordinator
        ("train_fit.py", "central_storage"),  # no BackupAndRestore there
        ("train_fit.py", "one_device"),
    ],
)
def test_example_scripts_run_alone_without_tf_config(tmp_path, script, strategy):
    """`python train.py` with no launcher: the runtime falls back to one local task."""
    extra = {"TFDIST_STRATEGY": strategy} if strategy else {}
    out = subprocess.run(
        [sys.executable, script, "--epochs", "1"],
        cwd=DIGITS,
        env=env_for(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    final = [r for r in reports(out.stdout) if r.get("final")]
    assert final and final[-1]["metrics"]["accuracy"] > 0.3
    assert (tmp_path / "run" / "model" / "saved_model.pb").is_file()


def test_strategy_is_built_once_and_a_different_one_is_refused(tmp_path):
    out = run_python(
        """
        from tfdist import runtime
        first = runtime.strategy()
        assert runtime.strategy() is first and runtime.strategy("none") is first
        try:
            runtime.strategy("mirrored")
        except ValueError as err:
            print("REFUSED", err)
        ctx = runtime.context()
        print("CTX", ctx.num_replicas, ctx.strategy, ctx.is_chief)
        import gc
        print("FROZEN", gc.get_freeze_count(), gc.isenabled())
        """,
        env_for(tmp_path),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "REFUSED strategy('mirrored'): this task already built 'none'" in out.stdout
    assert "CTX 1 none True" in out.stdout
    # TensorFlow's import (by strategy()) ran paused and froze its objects (tfdist.node.import_gc)
    frozen, enabled = next(line.split()[1:] for line in out.stdout.splitlines() if line.startswith("FROZEN"))
    assert int(frozen) > 100_000 and enabled == "True"


def test_job_options_reach_tensorflow(tmp_path):
    """options.auto_shard and options.communication end up in TensorFlow's own objects."""
    options = {"auto_shard": "data",
               "communication": {"implementation": "ring", "bytes_per_pack": 1024, "timeout_seconds": 5}}
    out = run_python(
        """
        import tensorflow as tf
        from tfdist import runtime
        strategy = runtime.strategy()
        comm = strategy.extended._communication_options
        print("COMM", comm.implementation.name, comm.bytes_per_pack, comm.timeout_seconds)
        ds = runtime.with_auto_shard(tf.data.Dataset.range(8))
        print("SHARD", ds.options().experimental_distribute.auto_shard_policy.name)
        print("OFF", runtime.with_auto_shard(ds, "off").options().experimental_distribute.auto_shard_policy.name)
        """,
        env_for(tmp_path, TFDIST_STRATEGY="multi_worker_mirrored", TFDIST_OPTIONS=json.dumps(options)),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "COMM RING 1024 5.0" in out.stdout
    assert "SHARD DATA" in out.stdout and "OFF OFF" in out.stdout


def test_evaluator_reads_custom_loop_checkpoints(tmp_path):
    """Checkpoints written with save_checkpoint(tf.train.Checkpoint(model=...)) are
    restored by model_checkpoint_loader: the evaluator scores what training scored."""
    out = run_python(
        """
        from tfdist import runtime
        strategy = runtime.strategy()
        import digits_data, tensorflow as tf, tf_keras
        x, y, xt, yt = digits_data.load()
        model = digits_data.dense_model(tf_keras)
        model.fit(x, y, epochs=2, batch_size=64, verbose=0)
        trained = model.evaluate(xt, yt, verbose=0, return_dict=True)["accuracy"]
        ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        directory = runtime.context().dirs.checkpoints
        runtime.save_checkpoint(ckpt, directory, strategy, number=7)
        runtime.mark_done()
        fresh = digits_data.dense_model(tf_keras)
        test = tf.data.Dataset.from_tensor_slices((xt, yt)).batch(128)
        metrics = runtime.run_sidecar_evaluator(
            fresh, test, load=runtime.model_checkpoint_loader(), idle_timeout=30
        )
        print("SCORES", trained, metrics["accuracy"])
        """,
        env_for(tmp_path),
        cwd=DIGITS,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    trained, evaluated = map(
        float, next(x for x in out.stdout.splitlines() if x.startswith("SCORES")).split()[1:]
    )
    assert trained > 0.6
    assert evaluated == pytest.approx(trained, abs=1e-6)
    evaluations = [r for r in reports(out.stdout) if r.get("evaluation")]
    assert evaluations[0]["checkpoint"] == "ckpt-007" and evaluations[0]["epoch"] == 7

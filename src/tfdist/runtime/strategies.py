"""Build the right tf.distribute strategy for this task, once.

One training script serves every role of a job: on a parameter-server job, ps and worker
tasks only run a ``tf.distribute.Server``, so :func:`strategy` starts it and never returns
there; the evaluator gets a local strategy; the chief and workers get the job's strategy
built with the job's options. TensorFlow is imported here, inside the functions, so that
``import tfdist.runtime`` stays cheap.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from tfdist import contract
from tfdist.runtime.env import read_context, resolve_strategy

_STATE: dict[str, Any] = {}

#: What TensorFlow says when collective ops are configured after the runtime started.
_LATE_INIT_TF_MESSAGE = "Collective ops must be configured at program startup"
LATE_INIT_HELP = (
    "tfdist.runtime.strategy() must be called before any other TensorFlow operation: "
    "MultiWorkerMirroredStrategy configures collective ops when TensorFlow starts, and "
    "this script already ran TensorFlow ops (created a tensor, a model or a dataset). "
    "Move the strategy() call to the top of the script, right after the imports."
)


class StrategyOrderError(RuntimeError):
    """The script touched TensorFlow before creating a multi-worker strategy."""


def strategy(name: str | None = None, *, exit_on_sigterm: bool = True) -> Any:
    """The tf.distribute strategy for this task (the same object on every call).

    ``name`` overrides the job's strategy (TFDIST_STRATEGY). On ParameterServerStrategy
    ps and worker tasks this starts the server and blocks until SIGTERM, then exits 143.
    In a MultiWorkerMirrored cluster SIGTERM ends the task at once (see
    :func:`install_sigterm_exit`); ``exit_on_sigterm=False`` keeps TensorFlow's own
    preemption handling instead.
    """
    if "strategy" in _STATE:
        if name and resolve_strategy(name, os.environ) != _STATE["asked"]:
            raise ValueError(
                f"strategy({name!r}): this task already built {_STATE['asked']!r}; "
                "TensorFlow allows one strategy per process"
            )
        return _STATE["strategy"]
    ctx = read_context()
    kind = resolve_strategy(name, os.environ)
    if kind == "parameter_server" and not ctx.cluster.get("chief"):
        raise ValueError(
            "parameter_server: the cluster has no chief, so nothing would coordinate "
            "training; add `chief: 1` to the job's roles"
        )
    import tensorflow as tf

    if ctx.is_evaluator:
        built = tf.distribute.get_strategy()  # evaluates locally, never joins the cluster
    elif kind == "parameter_server":
        if ctx.task_type in ("ps", "worker"):
            serve_forever()
        built = _parameter_server(tf, ctx.options, len(ctx.cluster.get("ps", [])))
    elif kind == "multi_worker_mirrored":
        built = _multi_worker_mirrored(tf, ctx.options, ctx.in_cluster)
        if ctx.in_cluster and exit_on_sigterm:
            install_sigterm_exit(ctx.task)
    elif kind == "mirrored":
        built = tf.distribute.MirroredStrategy()
    elif kind == "central_storage":
        built = tf.distribute.experimental.CentralStorageStrategy()
    elif kind == "one_device":
        gpus = tf.config.list_physical_devices("GPU")
        built = tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    else:
        built = tf.distribute.get_strategy()
    _STATE["strategy"] = built
    _STATE["asked"] = kind
    _STATE["kind"] = "none" if ctx.is_evaluator else kind
    return built


def current() -> Any | None:
    """The strategy built by :func:`strategy`, or None if it was not called."""
    return _STATE.get("strategy")


def current_kind() -> str | None:
    """The strategy name :func:`strategy` resolved, or None."""
    return _STATE.get("kind")


def tensorflow_started() -> bool:
    """True once TensorFlow's eager context exists (too late for collective ops)."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context as tf_context

    return getattr(tf_context.context(), "_context_handle", None) is not None


def communication_options(tf: Any, comm: dict[str, Any]) -> Any:
    """tf.distribute CommunicationOptions from the job's ``options.communication``."""
    impl = tf.distribute.experimental.CommunicationImplementation
    kwargs: dict[str, Any] = {
        "implementation": {"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}[
            comm.get("implementation") or "auto"
        ]
    }
    if comm.get("bytes_per_pack"):
        kwargs["bytes_per_pack"] = int(comm["bytes_per_pack"])
    if comm.get("timeout_seconds"):
        kwargs["timeout_seconds"] = float(comm["timeout_seconds"])
    return tf.distribute.experimental.CommunicationOptions(**kwargs)


def _multi_worker_mirrored(tf: Any, options: dict[str, Any], in_cluster: bool) -> Any:
    # Alone (no cluster) MWMS runs locally and does not care; in a cluster TF would fail
    # with a bare "Collective ops must be configured at program startup".
    if in_cluster and tensorflow_started():
        raise StrategyOrderError(LATE_INIT_HELP)
    comm = communication_options(tf, options.get("communication") or {})
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
    except RuntimeError as err:
        if _LATE_INIT_TF_MESSAGE in str(err):
            raise StrategyOrderError(LATE_INIT_HELP) from err
        raise


def partitioner(tf: Any, partition: dict[str, Any] | None, num_ps: int) -> Any | None:
    """MinSizePartitioner from ``options.partition`` (max_shards defaults to #ps)."""
    if not partition:
        return None
    return tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=int(partition.get("min_shard_bytes") or 256 << 10),
        max_shards=int(partition.get("max_shards") or max(1, num_ps)),
    )


def _parameter_server(tf: Any, options: dict[str, Any], num_ps: int) -> Any:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if not resolver.rpc_layer:
        resolver.rpc_layer = "grpc"
    return tf.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner(tf, options.get("partition"), num_ps)
    )


#: Inter-op threads a ParameterServerStrategy worker's server needs at least: with one (a
#: one-CPU container, or ``TF_NUM_INTEROP_THREADS=1`` on a shared machine) the long-running
#: closures of ``tfdist.runtime.sync``, a loop making a ``RemoteCall`` per step, hang.
MIN_WORKER_INTER_OP = 2


def worker_inter_op_threads(task_type: str, env: Mapping[str, str], cpus: int) -> int | None:
    """How many inter-op threads to give this task's server, when the pool TensorFlow would
    size (``TF_NUM_INTEROP_THREADS``, else one per CPU this process may run on) is too small
    for a worker: None, TensorFlow's own choice stands."""
    if task_type != "worker":
        return None
    try:
        wanted = int(env.get("TF_NUM_INTEROP_THREADS") or 0)
    except ValueError:
        wanted = 0
    planned = wanted if wanted > 0 else cpus
    return MIN_WORKER_INTER_OP if planned < MIN_WORKER_INTER_OP else None


def serve_forever() -> None:
    """Run this task's tf.distribute.Server until SIGTERM/SIGINT, then exit 143/130.

    The exit code is the conventional 128 + signal: a server stopped from outside (a
    preempted pod, a killed machine) must read as retryable to restart policies, never
    as a success; when tfdist itself stops it, the code does not matter.

    ``server.join()`` blocks inside C++ where Python signal handlers never run, so the
    main thread sleeps in short naps and the handler itself leaves, with
    ``os._exit`` to skip TF's teardown, which can hang while peers are gone. The handler
    touches no lock: it runs on the main thread between bytecodes, and a handler that set
    a ``threading.Event`` the main thread was waiting on deadlocked on the Event's own
    lock (seen on a loaded machine: the ps then ignored SIGTERM until SIGKILL).
    """
    import tensorflow as tf

    ctx = read_context()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    threads = worker_inter_op_threads(ctx.task_type, os.environ, len(os.sched_getaffinity(0)))
    config = None
    if threads is not None:
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads)
        print(f"tfdist: {ctx.task} runs {threads} inter-op threads (TF_NUM_INTEROP_THREADS or its CPUs "
              f"gave fewer; a parameter-server worker needs {threads})", flush=True)
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=ctx.task_type,
        task_index=ctx.task_index,
        protocol=resolver.rpc_layer or "grpc",
        config=config,
        start=True,
    )

    def on_signal(signum: int, _frame: Any) -> None:
        os.write(sys.stdout.fileno(), f"tfdist: {ctx.task} stopping\n".encode())
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    print(f"tfdist: {ctx.task} serving at {server.target}", flush=True)
    while True:
        # Not signal.pause(): a signal that lands after the interpreter's last check for
        # pending handlers but before pause() enters the kernel is consumed by the C-level
        # handler, and pause() then waits for a second signal (a ps that ignored tfdist's
        # SIGTERM until SIGKILL). A bounded sleep runs the pending handler within 0.5 s.
        time.sleep(0.5)


#: Deferred SIGTERM: while a preemption-aware callback is training, SIGTERM sets
#: ``requested`` instead of exiting, and a timer exits after ``grace`` seconds if the save
#: never happens (a peer already gone, a collective stuck).
_DEFER: dict[str, Any] = {"armed": False, "grace": 0.0, "requested": threading.Event()}


def _exit_now(task: str) -> None:
    print(f"tfdist: {task} got SIGTERM, exiting", flush=True)
    sys.stderr.flush()
    os._exit(128 + signal.SIGTERM)


def sigterm_notice(task: str, grace: float, kind: str | None) -> str:
    """What a task says when SIGTERM asks it to save. Under MultiWorkerMirrored it promises
    no time: the SIGTERM may be a group restart's, whose grace is shorter than the save
    window (``tfdist.supervisor.policy.restart_grace``) because a group that lost a member
    has nothing to save (no step can be agreed); a stop or a preemption gets the window."""
    if kind == "multi_worker_mirrored":
        return (f"tfdist: {task} got SIGTERM; saving a backup if every worker reaches an agreed "
                "step, else exiting")
    return f"tfdist: {task} got SIGTERM, saving before exiting (within {grace:g}s)"


def defer_sigterm(grace: float) -> threading.Event:
    """From now on SIGTERM only sets the returned event; exit within ``grace`` seconds anyway."""
    _DEFER.update(armed=True, grace=grace)
    return _DEFER["requested"]


def undefer_sigterm() -> None:
    _DEFER["armed"] = False


def install_sigterm_exit(task: str) -> None:
    """Make SIGTERM end this process promptly, exit code 143.

    Measured (TF 2.21): once MultiWorkerMirroredStrategy enables the coordination
    service, TensorFlow installs its own SIGTERM handler (for preemption checkpoints) and
    the process no longer dies on SIGTERM, so every stop or group restart would wait for
    the launcher's SIGKILL. A Python handler alone is not enough either: it runs only
    when the main thread returns to Python, and a task whose peer died is blocked inside
    a collective. Python's C-level handler always writes the signal number to the wakeup
    fd, so a daemon thread reading it can exit while the main thread is stuck.

    While :func:`defer_sigterm` is armed (see ``tfdist.runtime.preemption``), SIGTERM asks
    training to save a backup at the next step and leave; the grace timer is the backstop.
    """
    if threading.current_thread() is not threading.main_thread() or _DEFER.get("installed"):
        return
    _DEFER["installed"] = True
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def leave() -> None:
        if not _DEFER["armed"]:
            _exit_now(task)
        if _DEFER["requested"].is_set():
            return
        kind = current_kind() or os.environ.get(contract.STRATEGY)
        print(sigterm_notice(task, _DEFER["grace"], kind), flush=True)
        _DEFER["requested"].set()
        timer = threading.Timer(_DEFER["grace"], _exit_now, args=(task,))
        timer.daemon = True
        timer.start()

    # The Python-level handler does nothing: only the thread below acts, so no lock or
    # print ever runs re-entrantly inside whatever the main thread was doing.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            data = os.read(read_fd, 16)
            if not data or signal.SIGTERM in data:
                leave()

    threading.Thread(target=watch, name="tfdist-sigterm", daemon=True).start()


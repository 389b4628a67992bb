"""The program a MultiWorkerMirrored chief or worker runs its script through: the script runs
unchanged, then the tasks of the cluster leave together.

Why (docs/local.md, "How MultiWorkerMirrored tasks leave"): TensorFlow 2.21's coordination
service lives in the chief's process (worker-0's without a chief) and dies with it, with no
shutdown barrier, and the last all-reduce is not a barrier: the leader can return from
``fit`` and exit while a peer still needs the service, which then waits for a heartbeat to
fail or never returns. No launcher setting can ask for a shutdown barrier (the strategy
configures the service itself), so this program runs the script in the task's own process
and, once it has returned, holds the exit until every peer has returned too.

A task whose command is ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` is started as
``python PROGRAM SECONDS SCRIPT ARGS`` (or ``python -c SOURCE SECONDS ...`` on a node without
tfdist: :func:`launch`). The program runs the script with :mod:`runpy` in the same process,
as ``__main__``, with ``sys.argv`` and ``sys.path[0]`` as ``python SCRIPT`` would have them.
When the script ends with success (it returns, or raises ``SystemExit`` with 0 or None) and
TensorFlow's coordination service is up in this process (the script imported TensorFlow
and a MultiWorkerMirroredStrategy initialized it), the task announces in the service's
key-value store that it has left (``tfdist/left/<job>/<index>``) and waits until every task
of the cluster (its ``chief`` and ``worker`` entries in TF_CONFIG) has announced, for at most
SECONDS (the job's drain): the leader thus keeps the service up until its peers are done
with it. Then it exits with the script's code, the ordinary way (atexit handlers run).
Without the service (no TensorFlow, another strategy) it exits at once. A script that fails
is not held: an exception prints its traceback (without this program's frames) and exits
1, a ``SystemExit`` with another code exits with it, as ``python SCRIPT`` would; on the way
it sets its key to ``failed CODE`` (for at most 2 s), so a peer stops waiting for it.

Standard library only and no tfdist import at all: it runs as a file or from its source
text in any job's interpreter (tests/test_structure.py checks the node package's rule).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: This file: ``python PROGRAM SECONDS SCRIPT ARGS`` where tfdist is installed.
PROGRAM = str(Path(globals().get("__file__", "leave_program.py")).with_name("leave_program.py"))
#: The key a task sets when it has left: ``KEY.format(job="worker", index=1)``.
KEY = "tfdist/left/{job}/{index}"
#: The value of a task's key once its script succeeded (a failed one: ``failed CODE``).
LEFT = "left"
#: The TF_CONFIG jobs the coordination service of MultiWorkerMirroredStrategy coordinates.
JOBS = ("chief", "worker")
#: Strategies and roles whose tasks are run through this program.
STRATEGY = "multi_worker_mirrored"

#: A command's first word that is a Python interpreter (tfdist.node.spares reads it too).
PYTHON = re.compile(r"python(3(\.\d+)?)?")


# -- the launcher's side -------------------------------------------------------------------

def applies(command: Sequence[str]) -> bool:
    """Is ``command`` ``python SCRIPT ...`` or ``python -m MODULE ...`` (no Python options)?"""
    if len(command) < 2 or not PYTHON.fullmatch(os.path.basename(command[0])):
        return False
    if command[1] == "-m":
        return len(command) > 2 and bool(command[2]) and not command[2].startswith("-")
    return bool(command[1]) and not command[1].startswith("-")


def plan(command: Sequence[str], strategy: str, role: str, seconds: float,
         carry: str = "file") -> dict[str, Any] | None:
    """What a task of ``role`` running ``command`` needs to leave with its peers (given to
    :func:`launch` where it starts): None when it is run as it is (another strategy or role,
    or a command of another shape). ``carry``: how the node finds this program: ``file``
    (this file: tfdist is installed there), ``source`` (its text travels with the plan: a
    node without tfdist) or ``node`` (the node reads it from its own copy of this package,
    e.g. the YARN agent's zip, or the caller names the file: a pod's mounted ConfigMap)."""
    if strategy != STRATEGY or role not in JOBS or not applies(command):
        return None
    leave: dict[str, Any] = {"seconds": max(0.0, float(seconds))}
    if carry == "source":
        leave["source"] = program_source()
    elif carry == "file":
        leave["file"] = PROGRAM
    return leave


def complete(leave: Mapping[str, Any]) -> dict[str, Any]:
    """``leave`` with the program's file or text in it (a ``node`` plan gets this copy's
    text): what a warm spare needs to run the program (tfdist.node.spare_program)."""
    found = dict(leave)
    if not found.get("file") and not found.get("source"):
        found["source"] = program_source()
    return found


def launch(command: Sequence[str], leave: Mapping[str, Any] | None) -> list[str]:
    """The argv that starts ``command`` through this program (``leave`` from :func:`plan`),
    or ``command`` itself when ``leave`` is None or the command is not of the shape."""
    if not leave or not applies(command):
        return list(command)
    if leave.get("file"):
        program = [str(leave["file"])]
    else:
        program = ["-c", str(leave.get("source") or program_source())]
    return [command[0], *program, f"{float(leave['seconds']):g}", *command[1:]]


def program_source() -> str:
    """This program's text, read through its package's loader (so from the YARN agent's
    zip too)."""
    import pkgutil

    data = pkgutil.get_data(__package__ or "tfdist.node", "leave_program.py")
    if data is None:
        raise OSError("tfdist.node.leave_program cannot be read")
    return data.decode()


# -- the task's side -----------------------------------------------------------------------

def cluster_tasks(tf_config: str | None) -> tuple[list[tuple[str, int]], tuple[str, int] | None]:
    """The coordinated tasks of TF_CONFIG (``(job, index)``, chief first) and this one's."""
    try:
        config = json.loads(tf_config or "{}")
        cluster = config.get("cluster") or {}
        tasks = [(job, i) for job in JOBS for i in range(len(cluster.get(job) or []))]
        task = config.get("task") or {}
        me = (str(task["type"]), int(task["index"])) if "type" in task else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return [], None
    return tasks, me


def _coordination() -> Any:
    """TensorFlow's eager context when its coordination service is up in this process (the
    script imported TensorFlow and a strategy configured the service), else None. Never
    imports anything: the module is taken from ``sys.modules``, where it is whenever a
    strategy configured the service."""
    context = sys.modules.get("tensorflow.python.eager.context")
    if context is None:
        return None
    try:
        ctx = context.context()
    except Exception:  # noqa: BLE001 - a TensorFlow half torn down: nothing to leave with
        return None
    if getattr(ctx, "coordination_service", None) is None or not getattr(ctx, "_initialized", True):
        return None
    return ctx


def _say(text: str) -> None:
    print(f"tfdist: {text}", file=sys.stderr, flush=True)


def leave_together(seconds: float, ctx: Any = None, tf_config: str | None = None,
                   clock: Any = time.monotonic) -> list[str] | None:
    """Announce that this task has left and wait (at most ``seconds``) until every task of
    the cluster has. Returns the tasks not heard from (empty: all left, or a one-task
    cluster: nothing is set or said), or None when there is no coordination service to leave
    with. ``ctx`` is the eager context (or a fake with
    ``set_config_key_value`` and ``get_config_key_value``)."""
    found = _peers(ctx, tf_config)
    if found is None:
        return None
    ctx, tasks, me = found
    if len(tasks) == 1:  # no peer to wait for (a one-task cluster)
        return []
    start = clock()
    name = f"{me[0]}-{me[1]}"
    try:
        ctx.set_config_key_value(KEY.format(job=me[0], index=me[1]), LEFT)
    except Exception as err:  # noqa: BLE001 - already set (a second run), or the service is gone
        if type(err).__name__ != "AlreadyExistsError":
            _say(f"{name} could not tell its peers it left ({_first_line(err)}); leaving")
            return [f"{j}-{i}" for j, i in tasks if (j, i) != me]
    missing: list[str] = []
    failed: list[str] = []
    for job, index in tasks:
        if (job, index) == me:
            continue
        left = seconds - (clock() - start)
        if left <= 0:
            missing.append(f"{job}-{index}")
            continue
        try:
            if ctx.get_config_key_value(KEY.format(job=job, index=index), max(1, int(left * 1000))) != LEFT:
                failed.append(f"{job}-{index}")
        except Exception as err:  # noqa: BLE001 - timed out, or the service (its leader) is gone
            missing.append(f"{job}-{index}")
            if type(err).__name__ != "DeadlineExceededError":
                _say(f"{name} stopped waiting for its peers: {_first_line(err)}")
                missing.extend(f"{j}-{i}" for j, i in tasks[tasks.index((job, index)) + 1:] if (j, i) != me)
                break
    waited = clock() - start
    failures = f"; failed: {', '.join(failed)}" if failed else ""
    if missing:
        _say(f"{name} left after waiting {waited:.1f}s for its peers; not heard from: "
             f"{', '.join(missing)}{failures}")
    else:
        _say(f"{name} left with its peers (waited {waited:.1f}s for {len(tasks) - 1}{failures})")
    return missing


def _peers(ctx: Any, tf_config: str | None) -> tuple[Any, list[tuple[str, int]], tuple[str, int]] | None:
    """The context (``ctx``, or this process's), the coordinated tasks and this one; None
    without a coordination service or when this task is not one of them."""
    ctx = _coordination() if ctx is None else ctx
    if ctx is None:
        return None
    tasks, me = cluster_tasks(os.environ.get("TF_CONFIG") if tf_config is None else tf_config)
    if me is None or me not in tasks:
        return None
    return ctx, tasks, me


def tell_failed(code: int, ctx: Any = None, tf_config: str | None = None, bound: float = 2.0) -> bool:
    """A task whose script failed (exit ``code``) tells its peers so, without waiting for them:
    a peer waiting in :func:`leave_together` then stops waiting for it. The call is bounded by
    ``bound`` seconds (a thread: a service that is gone must not hold a failed task). True when
    it was told."""
    found = _peers(ctx, tf_config)
    if found is None or len(found[1]) == 1:
        return False
    ctx, _, me = found
    told: list[bool] = []

    def tell() -> None:
        with contextlib.suppress(Exception):  # already set, or the service is gone
            ctx.set_config_key_value(KEY.format(job=me[0], index=me[1]), f"failed {code}")
            told.append(True)

    teller = threading.Thread(target=tell, name="tfdist-tell-failed", daemon=True)
    teller.start()
    teller.join(bound)
    return bool(told)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def _succeeded(code: object) -> bool:
    """Does ``SystemExit(code)`` exit 0 (None, 0 or False)?"""
    return code is None or (isinstance(code, int) and code == 0)


def _own_frames(tb: Any) -> Any:
    """``tb`` without its first frames that belong to this program or to runpy: the traceback
    ``python SCRIPT`` would print."""
    mine = {globals().get("__file__", "<string>"), "<string>"}
    while tb is not None and tb.tb_next is not None and (
            tb.tb_frame.f_code.co_filename in mine or tb.tb_frame.f_globals.get("__name__") == "runpy"):
        tb = tb.tb_next
    return tb


def run(argv: Sequence[str]) -> None:
    """Run ``SCRIPT ARGS`` or ``-m MODULE ARGS`` as ``__main__``, as ``python`` would."""
    import runpy  # not at the top: the launcher imports this module for plan() and launch()

    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def main(args: Sequence[str]) -> int:
    """``SECONDS SCRIPT ARGS`` or ``SECONDS -m MODULE ARGS``: the exit code of the task."""
    seconds, argv = float(args[0]), list(args[1:])
    try:
        run(argv)
    except SystemExit as done:
        if not _succeeded(done.code):
            tell_failed(done.code if isinstance(done.code, int) else 1)
            raise
    except Exception as err:  # noqa: BLE001 - printed as python SCRIPT would, exit code 1
        tb = _own_frames(err.__traceback__)
        sys.excepthook(type(err), err.with_traceback(tb), tb)
        tell_failed(1)
        return 1
    leave_together(seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

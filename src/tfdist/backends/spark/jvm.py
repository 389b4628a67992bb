"""The Spark driver's JVM as tfdist sees it: where its output goes, which process it is (to
end it when its session never started), its errors in one line, and ending a stage from
outside."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """The driver JVM inherits tfdist's stdout and stderr when pyspark starts it; point both
    at a file in the run directory meanwhile, so its log lines never mix with the job's
    console or the ``--json`` summary (the JVM keeps writing there for its whole life)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield
    finally:
        for fd, copy in ((1, saved[0]), (2, saved[1])):
            os.dup2(copy, fd)
            os.close(copy)


#: The mark (procs.TOKEN_VAR) the driver JVM of the run ``token`` carries: ``token/spark-driver``.
DRIVER = "spark-driver"


@contextlib.contextmanager
def marked(token: str) -> Iterator[None]:
    """Processes started meanwhile carry ``TOKEN_VAR=token/spark-driver``: pyspark starts the
    driver JVM with a copy of this process's environment and hands its Popen to nobody until
    the gateway answers, so an interrupt before that (Ctrl-C, SIGTERM) loses it. Worse,
    pyspark then removes the directory the JVM was to write its port into, the JVM's main
    thread dies on that, and the gateway's other threads keep it alive forever, never
    reading the stdin whose end would make it exit: an orphan. With the mark
    :func:`kill_driver` finds it (and the Python workers it forked in local mode)."""
    from tfdist.node.procs import TOKEN_VAR

    saved = os.environ.get(TOKEN_VAR)
    os.environ[TOKEN_VAR] = f"{token}/{DRIVER}"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(TOKEN_VAR, None)
        else:
            os.environ[TOKEN_VAR] = saved


def end_driver(token: str, started: bool, wait: float = 10.0) -> None:
    """End the driver JVM that :func:`marked` marked, and pyspark's memory of its gateway (a
    later session in this process starts a new one). When its session ``started`` (and was
    stopped), the JVM is told the pyspark way, an end of file on its stdin, and given
    ``wait`` seconds; then, or at once when the session never started, SIGKILL to whatever
    carries the mark."""
    from pyspark import SparkContext

    from tfdist.node.procs import kill_marked

    gateway = SparkContext._gateway  # type: ignore[attr-defined]
    proc = getattr(gateway, "proc", None)
    if gateway is not None:
        with contextlib.suppress(Exception):  # py4j: a gateway half made or already gone
            gateway.shutdown()
    if started and proc is not None:
        with contextlib.suppress(Exception):
            proc.stdin.close()
            proc.wait(timeout=wait)
    SparkContext._gateway = None  # type: ignore[attr-defined]
    SparkContext._jvm = None  # type: ignore[attr-defined]
    kill_marked(f"{token}/{DRIVER}")


#: A JVM exception's line in py4j's text: ``: java.util.FooException[: message]``.
_JAVA_EXCEPTION = re.compile(r"^(?:: )?((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)\b.*)$")


def first_line(err: BaseException) -> str:
    """The first meaningful line of a (py4j / JVM) error: the JVM exception py4j quotes
    (its class, and its message when it has one), else the first line."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    thrown = [m.group(1) for m in map(_JAVA_EXCEPTION.match, lines) if m]
    useful = [ln for ln in lines if "Exception:" in ln or "Error:" in ln]
    return ((thrown or useful or lines or [type(err).__name__])[0])[:400]


def ui_race(err: BaseException) -> bool:
    """Whether a session start failed on Spark's own race on YARN in client mode: the main
    thread starts the driver UI's handlers (``SparkUI.attachAllHandlers``) while the RPC
    thread, told by the just-registered AM, adds YARN's proxy filter to the same handlers
    (``YarnSchedulerBackend.addWebUIFilter``); Jetty's iteration then throws
    ConcurrentModificationException and SparkContext gives up. Nothing in the job's
    configuration causes it, so a new start is the remedy."""
    text = str(err)
    return "java.util.ConcurrentModificationException" in text and "attachAllHandlers" in text


def end_stage(sc: Any, group: str, executor: str | None) -> None:
    """Cancel the job ``group`` now, and drop ``executor`` (not None or local mode's ``driver``)
    as Spark's own heartbeat timeout drops one (``killAndReplaceExecutor``: no new task goes
    to it). For a host cut off, Spark would fail the barrier stage only once it declared the
    executor lost (``spark.network.timeout``, 120 s by default, or the master's worker timeout)."""
    with contextlib.suppress(Exception):  # py4j and JVM errors have no common base
        if executor and executor != "driver":
            sc._jsc.sc().killAndReplaceExecutor(executor)
    with contextlib.suppress(Exception):
        sc.cancelJobGroup(group)

"""The Spark driver's JVM as tfdist sees it: where its output goes, its errors in one line, and
ending a stage from outside."""

from __future__ import annotations

import contextlib
import os
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


def first_line(err: BaseException) -> str:
    """The first meaningful line of a (py4j / JVM) error."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    useful = [ln for ln in lines if "Exception:" in ln or "Error:" in ln]
    return ((useful or lines or [type(err).__name__])[0])[:400]


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

"""The function of the Spark barrier stage: what each barrier task runs in its pyspark worker.
It reads the task's facts from pyspark's :class:`BarrierTaskContext` and hands over to the
node's agent (:func:`tfdist.node.agent.run_agent`). Shipped to the executors by value with
the node package (:mod:`tfdist.backends.spark.driver` registers it); it is Spark's side of the
node, so it alone may import pyspark, and only inside the worker."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import Any

from tfdist.node.agent import (
    BEAT_SECONDS,
    SILENCE_SECONDS,
    ancestors_argv,
    executor_id,
    run_agent,
    yarn_container,
)


def barrier_main(
    driver: tuple[str, int], secret: str, token: str, tasks: list[dict[str, Any]], archive: str | None,
    beat: float = BEAT_SECONDS, silence: float = SILENCE_SECONDS,
) -> Any:
    """The function of the barrier stage's mapPartitions (runs in a pyspark worker)."""

    def main(_rows: Any) -> Any:
        from pyspark import BarrierTaskContext, SparkFiles

        ctx = BarrierTaskContext.get()
        partition = ctx.partitionId()
        cwd = os.path.join(SparkFiles.getRootDirectory(), archive) if archive else tasks[partition]["cwd"]
        facts = {
            "hostname": socket.gethostname(),
            "executor": executor_id(os.environ, ancestors_argv()),
            "executor_address": ctx.getTaskInfos()[partition].address,
            "pid": os.getpid(),
            "stage": ctx.stageId(),
            "stage_attempt": ctx.attemptNumber(),
            "python": sys.executable,
            "cwd": os.path.abspath(cwd),
            **yarn_container(os.environ),
        }
        old = signal.signal(signal.SIGPIPE, signal.SIG_IGN) if hasattr(signal, "SIGPIPE") else None
        try:
            done = run_agent(driver, secret, token, tasks, partition, cwd, facts, beat=beat, silence=silence)
            yield json.dumps(done)
        finally:
            if old is not None:
                signal.signal(signal.SIGPIPE, old)

    return main

"""A worker loop that fails ends the run instead of hanging the chief (no TensorFlow).

The aggregator blocks on a gradient queue until K gradients arrive; a loop that died of an
error ClusterCoordinator does not retry (a bug in ``loss_fn``, a placement error) sends
none, so the chief waits for an aggregator call only in bounded slices and after each asks
the coordinator whether a scheduled function failed. ``coordinator.done()`` hands such an
error over once (and cancels closures still queued); a killed worker is retried by the
coordinator and raises nothing here.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable
from typing import Any

LOOP_CHECK_SECONDS = 0.5  # how often a waiting chief asks whether a worker loop failed
ABORT_WAIT_SECONDS = 30.0  # how long a failed run waits for the aggregator and the other loops

log = logging.getLogger(__name__)


def result_or_loop_error(future: Any, coordinator: Any, abort: Callable[[], None]) -> Any:
    """``future``'s result; if a worker loop fails first, ``abort()`` and re-raise its error."""
    while True:
        try:
            return future.result(timeout=LOOP_CHECK_SECONDS)
        except concurrent.futures.TimeoutError:
            raise_if_loop_failed(coordinator, abort)


def raise_if_loop_failed(coordinator: Any, abort: Callable[[], None]) -> None:
    """Re-raise a failed scheduled function's error, having called ``abort()`` (which stops
    what still waits: the aggregator, the other loops)."""
    try:
        coordinator.done()
    except Exception as error:
        log.error("tfdist.runtime.sync: a worker loop failed, stopping the run: %r", error)
        abort()
        raise


def wait_idle(coordinator: Any, seconds: float = ABORT_WAIT_SECONDS) -> bool:
    """Wait (at most ``seconds``) until no scheduled function runs; a further loop's error
    is dropped (the first one is what the run raises). True if idle."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if coordinator.done():
                return True
        except Exception:  # noqa: BLE001, S112 - a second loop's error
            continue
        time.sleep(0.1)
    return False

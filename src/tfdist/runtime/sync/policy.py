"""The trainer loop's decisions, in plain Python (pure: the trainer acts on them).

What the coordinator decides between TensorFlow calls: how many worker closures to add,
when a polling ``timeout`` step takes what arrived, how long to wait between polls, and
what the counters say was dropped. The arithmetic that runs on the ps (the count slot,
the rescale, the accumulators' threshold) is TensorFlow ops in
:mod:`tfdist.runtime.sync.trainer`, tested there through a real cluster.
"""

from __future__ import annotations

from tfdist.runtime.sync.config import UpdateConfig


def closures_to_schedule(config: UpdateConfig, outstanding: int) -> int:
    """How many worker closures to add so that ``config.tokens`` are in flight."""
    return max(0, config.tokens - max(0, outstanding))


def take_now(config: UpdateConfig, arrived: int, elapsed: float) -> int:
    """How many gradients to take now (0: keep waiting), for the polling ``timeout`` mode.

    Take as soon as K arrived; once ``timeout_seconds`` passed take what arrived if it is at
    least ``min_replicas``. Other modes take exactly when K arrived.
    """
    k = config.replicas_to_aggregate
    if arrived >= k:
        return arrived
    if (
        config.mode == "timeout"
        and config.timeout_seconds is not None
        and elapsed >= config.timeout_seconds
        and arrived >= config.min_replicas
    ):
        return arrived
    return 0


def dropped(attempted: int, accepted: int, pending: int) -> int:
    """Gradients the accumulators rejected: sent, but neither taken nor still waiting."""
    return max(0, attempted - accepted - pending)


def poll_interval(elapsed: float, *, floor: float = 0.0005, ceiling: float = 0.01) -> float:
    """Back-off between polls of the accumulator while waiting for gradients."""
    return min(ceiling, max(floor, elapsed / 20.0))

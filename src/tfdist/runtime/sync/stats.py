"""What a :class:`~tfdist.runtime.sync.trainer.SyncTrainer` run did, step by step and in
total (no TensorFlow: plain records the chief fills from the aggregator's results)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepStats:
    """What one applied step did: ``count`` gradients averaged (exactly K, fewer only in
    ``timeout`` mode), ``dropped`` stale ones taken off the queue while collecting them,
    the mean loss and the ids of the workers whose gradients were applied."""

    step: int
    count: int
    dropped: int
    loss: float
    workers: list[int]


@dataclass
class TrainStats:
    """Totals over a run; ``attempts`` and the final ``dropped`` (what was still queued
    when the loops ended) are counted by ``finish()``."""

    steps: int = 0
    attempts: int = 0
    taken: int = 0
    dropped: int = 0
    history: list[StepStats] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "attempts": self.attempts,
            "taken": self.taken,
            "dropped": self.dropped,
        }

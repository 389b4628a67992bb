"""Advice on the checkpoint interval, from a job's goodput breakdown (pure).

Kept apart from the breakdown itself: the breakdown says where the time went, this says
what to change; the two rules it applies are the literature's, not tfdist's own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

#: A checkpoint interval CheckFreq-style tuning keeps saves under when failures are rare: the
#: share of training time saves may cost.
CHECKPOINT_SHARE = 0.05


def advise(seconds: Mapping[str, float], *, failures: int, wall: float, steps_kept: int,
           saves: Sequence[float], intervals: Sequence[float]) -> str | None:
    """One sentence when the checkpoint interval plainly cost time, else None.

    With failures: Young/Daly's first-order optimum ``sqrt(2 * C * MTBF)`` (C the measured
    cost of one save, MTBF the training time between failures of this job) minimises saves'
    cost plus the expected recomputation (half an interval per failure); it is advised when
    the job's own checkpoint-plus-lost time exceeds the optimum's expected cost by a clear
    margin. Without failures, CheckFreq's rule: saves should cost at most
    :data:`CHECKPOINT_SHARE` of training.
    """
    if not saves or not intervals:
        return None
    cost = sum(saves) / len(saves)
    interval = sum(intervals) / len(intervals)
    if cost <= 0:
        return None
    sec = seconds
    training = sum(sec.get(c, 0.0) for c in ("productive", "lost", "checkpoint", "evaluation"))
    rate = steps_kept / sec["productive"] if sec.get("productive") else 0.0

    def steps(span: float) -> str:
        return f", ~{span * rate:.0f} steps" if rate > 0 else ""

    def every(span: float) -> str:
        """``every 12.0s, ~300 steps``; an interval that would not fit twice in the time the
        job trained is no interval for this job (the advice had been to save every 120 s in
        a 40 s job): say what it means instead."""
        if 2 * span > training:
            return (f"at most once before the end (the interval that would, {span:.1f}s, is "
                    f"{100 * span / training:.0f}% of the {training:.1f}s this job trained)")
        return f"every {span:.1f}s{steps(span)}"

    if failures == 0:
        if training > 0 and sec.get("checkpoint", 0.0) > 2 * CHECKPOINT_SHARE * training:
            better = cost / CHECKPOINT_SHARE
            return (f"checkpoints cost {100 * sec['checkpoint'] / training:.0f}% of training "
                    f"({cost:.2f}s a save, one every {interval:.1f}s) and nothing failed: saving "
                    f"{every(better)} keeps them under {100 * CHECKPOINT_SHARE:.0f}%")
        return None
    if training <= 0:  # failures before any training step: no interval to judge
        return None
    mtbf = training / failures
    best = math.sqrt(2 * cost * mtbf)
    expected = training / best * cost + failures * best / 2
    lost, saving = sec.get("lost", 0.0), sec.get("checkpoint", 0.0)
    clear = lost + saving - expected > max(1.0, 0.02 * wall)  # worth saying
    if clear and lost > saving and best < interval:
        return (f"lost {sec['lost']:.1f}s recomputing steps in {failures} restart"
                f"{'s' if failures > 1 else ''}, more than the {sec.get('checkpoint', 0.0):.1f}s "
                f"checkpoints cost: saving {every(best)} instead of every "
                f"{interval:.1f}s would cost ~{expected:.1f}s (Young/Daly: sqrt(2 x {cost:.2f}s a "
                f"save x {mtbf:.0f}s between failures))")
    if clear and saving > lost and best > interval:
        return (f"checkpoints cost {sec['checkpoint']:.1f}s, more than the {sec.get('lost', 0.0):.1f}s "
                f"lost to recomputation in {failures} restart{'s' if failures > 1 else ''}: saving "
                f"{every(best)} instead of every {interval:.1f}s would cost "
                f"~{expected:.1f}s (Young/Daly: sqrt(2 x {cost:.2f}s x {mtbf:.0f}s))")
    return None

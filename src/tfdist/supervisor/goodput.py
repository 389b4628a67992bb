"""Goodput: the share of a job's wall time spent on steps the final model keeps, and where
the rest went (badput by cause). Pure: computed from the supervisor's task transitions and
the reference task's progress reports, with no I/O and no clock.

Every second of the job, from the supervisor's start to its end, is given exactly one cause,
so the causes add up to the wall time by construction:

- ``productive``: training steps the final model keeps.
- ``startup``: the launch to the first training step (importing TensorFlow, building the
  strategy and the model, restoring).
- ``restart``: a failure to the first step after it (noticing, stopping the group, backoff,
  starting again).
- ``waiting``: a round of tasks started but not all running yet (a gang that is being
  scheduled: the supervisor's ``starting`` phase, see :mod:`tfdist.supervisor.phase`), or a
  wait the runtime reported (a ``wait`` mark).
- ``lost``: steps computed again after a restore to an older checkpoint (the work between
  the checkpoint restored and the failure, and the failure's own tail).
- ``checkpoint``: checkpoint saves that blocked training (``checkpoint`` marks).
- ``evaluation``: evaluation inside training that blocked it (``eval`` marks).
- ``shutdown``: the end of training to the end of the job (final save, draining, stopping
  servers).
- ``staging``: copying the reference task's inputs to its node before its script started
  (``stage`` marks the node side sends; see tfdist.node.staging), at the start and after a
  restart that copied again.

Training is what the *reference* task does: the task whose success is the job's (the chief,
or worker-0 without one). Under all-reduce every worker steps with it; under parameter
servers it is the coordinator, so a worker restarted alone slows training but does not stop
it, and costs no badput here. A restart of the reference task starts a new *attempt* of the
job's accounting; the attempt ends at the failure that caused the restart (the latest failure
of any task after the reference's last report), not when the reference was stopped.

The runtime (``tfdist.runtime``) sends marks as ordinary progress lines (see
:mod:`tfdist.contract`): ``begin`` with the step training starts from (the restored step),
``checkpoint`` with the step saved and the seconds the save blocked, ``eval`` with seconds.
A script that sends none still gets an answer from its step reports, with a note saying what
was assumed; one that reports no step at all gets none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfdist import contract
from tfdist.states import ENDED_TASK_STATES, PhaseState, TaskState
from tfdist.supervisor import checkpoint_advice

#: Every cause, productive first; the order the breakdown is shown in.
CAUSES: tuple[str, ...] = ("productive", "startup", "restart", "waiting", "lost", "checkpoint",
                           "evaluation", "shutdown", "staging")
BADPUT: tuple[str, ...] = CAUSES[1:]
#: Badput the job asked for (validation inside ``fit``): not a loss to fix, so the summary
#: names it apart from the biggest loss.
ASKED_FOR: tuple[str, ...] = ("evaluation",)


@dataclass(frozen=True)
class Transition:
    """A task changed state at wall-clock ``time`` (a row of ``events.jsonl``)."""

    time: float
    task: str
    attempt: int
    state: TaskState


@dataclass(frozen=True)
class Report:
    """A progress report of a task at wall-clock ``time`` (a row of ``progress.jsonl``)."""

    time: float
    task: str
    attempt: int
    data: Mapping[str, Any]


@dataclass(frozen=True)
class PhaseChange:
    """The job entered ``phase`` (see :mod:`tfdist.supervisor.phase`) at wall-clock
    ``time``: the supervisor's own account of when a round was starting. Events without any
    (records of a running job, older runs) have the gang's wait read from the tasks'
    transitions instead."""

    time: float
    phase: PhaseState


GoodputEvent = Transition | Report | PhaseChange


@dataclass(frozen=True)
class AttemptGoodput:
    """One attempt of the job's training: from its (re)start to the failure that ended it."""

    attempt: int
    start: float
    end: float
    seconds: Mapping[str, float]
    restored_step: int | None = None
    last_step: int | None = None
    kept_step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "start": round(self.start, 3), "end": round(self.end, 3),
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
                "restored_step": self.restored_step, "last_step": self.last_step,
                "kept_step": self.kept_step}


@dataclass(frozen=True)
class Goodput:
    """The breakdown of one job's wall time; ``seconds`` has every cause in :data:`CAUSES`."""

    wall: float
    seconds: Mapping[str, float]
    attempts: tuple[AttemptGoodput, ...]
    reference: str
    steps_kept: int = 0
    steps_lost: int = 0
    checkpoint_saves: int = 0
    advice: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def share(self) -> float:
        """Goodput: productive seconds over wall seconds (0 for an empty job)."""
        return self.seconds.get("productive", 0.0) / self.wall if self.wall > 0 else 0.0

    @property
    def biggest_loss(self) -> tuple[str, float] | None:
        """The badput cause that cost most, or None if nothing was lost (evaluation, work the
        job asked for, is not a loss)."""
        cause = max((c for c in BADPUT if c not in ASKED_FOR), key=lambda c: self.seconds.get(c, 0.0))
        return (cause, self.seconds[cause]) if self.seconds.get(cause, 0.0) > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"goodput": round(self.share, 4), "wall_seconds": round(self.wall, 3),
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
                "reference": self.reference, "steps_kept": self.steps_kept,
                "steps_lost": self.steps_lost, "checkpoint_saves": self.checkpoint_saves,
                "advice": self.advice, "notes": list(self.notes),
                "attempts": [a.to_dict() for a in self.attempts]}


#: The note on the goodput of a job still running (computed so far).
SO_FAR = "so far: the job is still running"


def so_far(found: Goodput) -> dict[str, Any]:
    """The breakdown of a running job as stored and shown: :meth:`Goodput.to_dict` and a
    note saying it is so far."""
    data = found.to_dict()
    data["notes"] = [*data["notes"], SO_FAR]
    return data


def summary_line(data: Mapping[str, Any]) -> str:
    """The one line the end-of-job summary (and ``status``) shows, from :meth:`Goodput.to_dict`'s
    dict: goodput as one number, the biggest loss, and the evaluation the job asked for
    apart (its time is not in steps kept, but it is no loss to fix). A damaged record reads
    as zeros."""
    wall = _number(data.get("wall_seconds")) or 0.0
    seconds = data.get("seconds")
    seconds = seconds if isinstance(seconds, Mapping) else {}
    text = f"goodput {100 * (_number(data.get('goodput')) or 0.0):.1f}% " \
           f"({_number(seconds.get('productive')) or 0.0:.1f}s of {wall:.1f}s in steps kept)"
    def share(value: float) -> str:
        return f" ({100 * value / wall:.0f}%)" if wall > 0 else ""

    lost = [(c, _number(seconds.get(c)) or 0.0) for c in BADPUT if c not in ASKED_FOR]
    cause, worst = max(lost, key=lambda cw: cw[1]) if lost else ("", 0.0)
    if worst > 0:
        text += f"; biggest loss: {cause} {worst:.1f}s{share(worst)}"
    evaluation = _number(seconds.get("evaluation")) or 0.0
    if evaluation > 0:
        text += f"; evaluation in fit {evaluation:.1f}s{share(evaluation)} (asked for, not lost)"
    return text


# -- the computation ------------------------------------------------------------------------


@dataclass
class _Attempt:
    """What the events say of one attempt of the reference task (internal)."""

    number: int
    pending: float | None = None
    stopped: float | None = None  # STOPPING or an end state, whichever first
    begin: tuple[float, int | None] | None = None  # (time, restored step) of training's start
    points: list[tuple[float, int]] = field(default_factory=list)  # (time, step) reached
    saves: list[tuple[float, float, int | None]] = field(default_factory=list)  # (start, end, step)
    blocks: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, cause)
    final: float | None = None  # the final report: training's end
    last_report: float | None = None


def _number(value: Any) -> float | None:
    """A finite non-negative number from a report, or None (reports are task output: hostile)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _step(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number < 2**62 else None


def _read(att: _Attempt, rep: Report) -> None:
    data = rep.data
    att.last_report = rep.time
    mark = data.get(contract.MARK)
    step = _step(data.get("step"))
    seconds = _number(data.get("seconds"))
    if mark == contract.MARK_BEGIN:
        if att.begin is None:
            att.begin = (rep.time, step)
            if step is not None:
                att.points.append((rep.time, step))
        return
    if mark == contract.MARK_STAGE:
        if seconds is not None:
            att.blocks.append((rep.time - seconds, rep.time, "staging"))
        return
    if mark in (contract.MARK_CHECKPOINT, contract.MARK_EVAL, contract.MARK_WAIT):
        if seconds is not None:
            start = rep.time - seconds
            if mark == contract.MARK_CHECKPOINT:
                att.saves.append((start, rep.time, step))
            att.blocks.append((start, rep.time, _MARK_CAUSE[mark]))
        if step is not None and mark == contract.MARK_CHECKPOINT:
            att.points.append((rep.time, step))
        return
    if step is not None:
        att.points.append((rep.time, step))
    if data.get("final") is True and att.final is None:
        att.final = rep.time


_MARK_CAUSE = {contract.MARK_CHECKPOINT: "checkpoint", contract.MARK_EVAL: "evaluation",
               contract.MARK_WAIT: "waiting"}


def _time_at(att: _Attempt, step: int, lo: float, hi: float) -> float:
    """When attempt ``att`` reached ``step``: a checkpoint of that step ends it exactly, else
    the step reports are interpolated; clipped to ``[lo, hi]``."""
    for _, end, saved in att.saves:
        if saved == step:
            return min(max(end, lo), hi)
    points = sorted(att.points)
    before: tuple[float, int] | None = None
    for t, s in points:
        if s >= step:
            if before is None or s == before[1] or s == step:
                return min(max(t, lo), hi)
            t0, s0 = before
            return min(max(t0 + (t - t0) * (step - s0) / (s - s0), lo), hi)
        before = (t, s)
    return min(max(points[-1][0], lo), hi) if points else lo


def _paint(start: float, end: float, base: Sequence[tuple[float, float, str]],
           overlays: Sequence[tuple[float, float, str]]) -> dict[str, float]:
    """Seconds by cause over ``[start, end)``: ``base`` intervals (disjoint) give each moment
    a cause, ``overlays`` (checkpoint, evaluation, waits) win where they lie over them."""
    cuts = {start, end}
    for a, b, _ in (*base, *overlays):
        cuts.update((min(max(a, start), end), min(max(b, start), end)))
    edges = sorted(cuts)
    out = dict.fromkeys(CAUSES, 0.0)
    ov = sorted((max(a, start), min(b, end), c) for a, b, c in overlays if b > a)
    bs = sorted((max(a, start), min(b, end), c) for a, b, c in base if b > a)
    i = j = 0
    for x, y in zip(edges, edges[1:], strict=False):
        if y <= x:
            continue
        mid = (x + y) / 2
        while j < len(bs) and bs[j][1] <= mid:
            j += 1
        cause = bs[j][2] if j < len(bs) and bs[j][0] <= mid else "startup"
        while i < len(ov) and ov[i][1] <= mid:
            i += 1
        for a, b, c in ov[i:]:
            if a > mid:
                break
            if a <= mid < b:
                cause = c
                break
        out[cause] += y - x
    return out


def breakdown(events: Iterable[GoodputEvent], *, reference: str, start: float, end: float,
              ended: bool = True, succeeded: bool = True) -> Goodput | None:
    """The goodput of a job that ran from ``start`` to ``end`` (wall clock).

    ``reference`` names the task whose steps are training (see the module's docstring);
    ``ended`` is False for a job still running (its last attempt is not judged yet), and
    ``succeeded`` says whether its final model exists (else the last attempt keeps only the
    steps of its last checkpoint). None when the reference task reported no step.
    """
    seen = _gather(events, reference)
    if not any(a.points for a in seen.attempts.values()):
        return None
    order = [seen.attempts[n] for n in sorted(seen.attempts)]
    notes: list[str] = []
    bounds = _bounds(order, seen.failures, start, end)
    restored = [a.begin[1] if a.begin is not None else None for a in order]
    if any(a.points for a in order) and not any(a.begin for a in order if a.points):
        notes.append("no 'begin' marks: training's start is taken from the first step report "
                     "and restores from the checkpoints reported")
    last_steps = [max((s for _, s in a.points), default=None) for a in order]
    kept = _kept_steps(order, restored, last_steps, ended=ended, succeeded=succeeded, notes=notes)

    per_attempt: list[AttemptGoodput] = []
    total = dict.fromkeys(CAUSES, 0.0)
    steps_kept = steps_lost = 0
    for k, att in enumerate(order):
        s, e = bounds[k]
        seconds, k_kept, k_lost = _attempt_seconds(
            att, s, e, seen, first="startup" if k == 0 else "restart", last=k == len(order) - 1,
            kept_step=kept[k], origin=restored[k], last_step=last_steps[k], ended=ended,
            succeeded=succeeded)
        steps_kept += k_kept
        steps_lost += k_lost
        for cause, value in seconds.items():
            total[cause] += value
        per_attempt.append(AttemptGoodput(att.number, s, e, seconds, restored[k], last_steps[k],
                                          kept[k]))
    saves = [b - a for att in order for a, b, _ in att.saves]
    result = Goodput(wall=max(end - start, 0.0), seconds=total, attempts=tuple(per_attempt),
                     reference=reference, steps_kept=steps_kept, steps_lost=steps_lost,
                     checkpoint_saves=len(saves), notes=tuple(notes))
    advice = checkpoint_advice.advise(total, failures=len(per_attempt) - 1, wall=result.wall,
                                      steps_kept=steps_kept, saves=saves,
                                      intervals=_intervals(order))
    return Goodput(**{**result.__dict__, "advice": advice}) if advice else result


@dataclass
class _Seen:
    """What the events say (internal): the reference task's attempts, every task's failures,
    and when each task's attempt went pending and running (the rounds a gang waits in)."""

    attempts: dict[int, _Attempt] = field(default_factory=dict)
    failures: list[float] = field(default_factory=list)
    round_pending: dict[tuple[str, int], float] = field(default_factory=dict)
    round_running: dict[tuple[str, int], float] = field(default_factory=dict)
    #: (start, end) of each ``starting`` phase, when the supervisor said (see PhaseChange).
    starting: list[tuple[float, float]] | None = None


def _gather(events: Iterable[GoodputEvent], reference: str) -> _Seen:
    """The events in time order, sorted into what :func:`breakdown` needs."""
    seen = _Seen()
    attempts = seen.attempts
    starting_since: float | None = None
    for ev in sorted(events, key=lambda e: e.time):
        if isinstance(ev, PhaseChange):
            if seen.starting is None:
                seen.starting = []
            if starting_since is not None:
                seen.starting.append((starting_since, ev.time))
            starting_since = ev.time if ev.phase is PhaseState.STARTING else None
        elif isinstance(ev, Transition):
            if ev.state is TaskState.FAILED:
                seen.failures.append(ev.time)
            elif ev.state is TaskState.PENDING:
                seen.round_pending.setdefault((ev.task, ev.attempt), ev.time)
            elif ev.state is TaskState.RUNNING:
                seen.round_running.setdefault((ev.task, ev.attempt), ev.time)
            if ev.task != reference:
                continue
            att = attempts.setdefault(ev.attempt, _Attempt(ev.attempt))
            if ev.state is TaskState.PENDING and att.pending is None:
                att.pending = ev.time
            elif (ev.state is TaskState.STOPPING or ev.state in ENDED_TASK_STATES) \
                    and att.stopped is None:
                att.stopped = ev.time
        elif ev.task == reference:
            _read(attempts.setdefault(ev.attempt, _Attempt(ev.attempt)), ev)
    if seen.starting is not None and starting_since is not None:  # still starting
        seen.starting.append((starting_since, math.inf))
    return seen


def _bounds(order: Sequence[_Attempt], failures: Sequence[float], start: float,
            end: float) -> list[tuple[float, float]]:
    """Where each attempt's accounting starts and ends: at the failure that stopped it (the
    latest failure of any task after the attempt's last report), the last one at ``end``."""
    bounds: list[tuple[float, float]] = []
    seg_start = start
    for k, att in enumerate(order):
        if k == len(order) - 1:
            seg_end = end
        else:
            stopped = att.stopped if att.stopped is not None else order[k + 1].pending or end
            after = max(att.last_report or seg_start, att.pending or seg_start, seg_start)
            causes = [t for t in failures if after <= t <= stopped]
            seg_end = max(causes) if causes else stopped
        seg_end = min(max(seg_end, seg_start), end)
        bounds.append((seg_start, seg_end))
        seg_start = seg_end
    return bounds


def _kept_steps(order: Sequence[_Attempt], restored: Sequence[int | None],
                last_steps: Sequence[int | None], *, ended: bool, succeeded: bool,
                notes: list[str]) -> list[int | None]:
    """The step the final model keeps of each attempt (None: it reported no step); what had
    to be assumed goes to ``notes``."""
    kept: list[int | None] = []
    for k, att in enumerate(order):
        last = last_steps[k]
        if last is None:
            kept.append(None)
            continue
        later = [r for r in restored[k + 1:] if r is not None]
        saved = [s for _, _, s in att.saves if s is not None]
        if k == len(order) - 1:
            keep = last if not ended or succeeded else max(saved, default=restored[k] or 0)
        elif later:
            keep = min(last, min(later))
        elif saved:
            keep = max(saved)
        else:
            keep = last
            notes.append(f"attempt {att.number}: no restore step or checkpoint reported; "
                         "its steps are assumed kept")
        kept.append(keep)
    # A restore below an earlier attempt's start (an older checkpoint) undoes that one too.
    for k in range(len(order)):
        later = [r for r in restored[k + 1:] if r is not None]
        if later and kept[k] is not None:
            kept[k] = min(kept[k] or 0, min(later))
    return kept


def _gang_wait(seen: _Seen, s: float, train_from: float) -> tuple[float, float, str] | None:
    """A round of tasks started in ``[s, train_from)`` but not all running yet: waiting for the
    gang. The supervisor's ``starting`` phase when it was recorded (the first one that began
    in the attempt), else read from the tasks' transitions (only tasks seen running: one still
    pending when training starts is not waited for)."""
    if seen.starting is not None:
        for a, b in seen.starting:
            if s <= a < train_from and min(b, train_from) > a:
                return (a, min(b, train_from), "waiting")
        return None
    pend = {key: t for key, t in seen.round_pending.items() if s <= t < train_from}
    run = [seen.round_running[key] for key in pend if key in seen.round_running]
    if run:
        gang_from, gang_to = min(pend.values()), min(max(run), train_from)
        if gang_to > gang_from:
            return (gang_from, gang_to, "waiting")
    return None


def _attempt_seconds(att: _Attempt, s: float, e: float, seen: _Seen, *, first: str, last: bool,
                     kept_step: int | None, origin: int | None, last_step: int | None,
                     ended: bool, succeeded: bool) -> tuple[dict[str, float], int, int]:
    """One attempt's seconds by cause over ``[s, e)``, and its steps kept and lost.

    ``first`` is the cause of its time before training (startup, or restart), ``last`` says
    it is the job's last attempt, ``kept_step`` and ``origin`` are the step the final model
    keeps of it and the step it restored."""
    base: list[tuple[float, float, str]] = []
    overlays: list[tuple[float, float, str]] = []
    begin = att.begin[0] if att.begin is not None else min((t for t, _ in att.points), default=None)
    train_from = min(max(begin, s), e) if begin is not None else e
    gang = _gang_wait(seen, s, train_from)
    if gang is not None:
        overlays.append(gang)
    base.append((s, train_from, first))
    for a, b, cause in att.blocks:
        if cause == "staging" and b > s and a < e:  # before training: over startup or restart
            overlays.append((max(a, s), min(b, e), cause))
    steps_kept = steps_lost = 0
    if kept_step is not None and train_from < e:
        done = e
        if last and ended and succeeded:
            done = att.final if att.final is not None else max(t for t, _ in att.points)
            done = min(max(done, train_from), e)
        if last and (not ended or succeeded):
            keep_at = done
        elif origin is not None and kept_step <= origin:
            keep_at = train_from  # nothing of this attempt survived
        else:
            keep_at = _time_at(att, kept_step, train_from, e)
        base.append((train_from, keep_at, "productive"))
        base.append((keep_at, done, "lost"))
        if done < e:
            base.append((done, e, "shutdown"))
        for a, b, cause in att.blocks:
            if b > train_from and cause != "staging":
                overlays.append((max(a, train_from), b, cause))
        first_step = origin if origin is not None else min((st for _, st in att.points), default=0)
        steps_kept = max(0, kept_step - first_step)
        steps_lost = max(0, (last_step or 0) - max(kept_step, first_step))
    return _paint(s, e, base, overlays), steps_kept, steps_lost


def _intervals(order: Sequence[_Attempt]) -> list[float]:
    """Seconds between consecutive checkpoint saves within attempts (the interval in use)."""
    gaps: list[float] = []
    for att in order:
        ends = sorted(b for _, b, _ in att.saves)
        begin = att.begin[0] if att.begin is not None else None
        if begin is not None and ends:
            ends = [begin, *ends]
        gaps += [b - a for a, b in zip(ends, ends[1:], strict=False) if b > a]
    return gaps


# -- from the records -------------------------------------------------------------------------


def from_rows(transitions: Iterable[Mapping[str, Any]],
              reports: Iterable[Mapping[str, Any]]) -> list[GoodputEvent]:
    """Events from ``events.jsonl`` / the store's transitions (``time``, ``task``, ``attempt``,
    ``state``) and ``progress.jsonl`` / the store's progress rows (``time``, ``task``,
    ``attempt`` and the report's fields); rows that do not fit are skipped."""
    events: list[GoodputEvent] = []
    for row in transitions:
        try:
            state = TaskState(row["state"])
            events.append(Transition(float(row["time"]), str(row["task"]),
                                     int(row.get("attempt") or 0), state))
        except (KeyError, TypeError, ValueError):
            continue
    for row in reports:
        try:
            data = {k: v for k, v in row.items() if k not in ("time", "task", "attempt")}
            events.append(Report(float(row["time"]), str(row["task"]),
                                 int(row.get("attempt") or 0), data))
        except (KeyError, TypeError, ValueError):
            continue
    return events

"""Resource use in the job store: each task's samples, bounded, and what the page draws.

A task sampled every 5 s for a week would be 120,000 rows; a 1,000-task job 1,000 times
that. So each task keeps at most :data:`MAX_SAMPLES`, thinned as it grows (:class:`Thinning`):
every sample is numbered (``seq``); while fewer than the cap are kept, all are; at the cap,
every second one is deleted (those whose number is not a multiple of twice the stride)
and from then on only every second sample is stored, and so on. The kept samples always
cover the task's whole life, evenly, at a resolution that halves each time the cap is
reached; the latest sample (and the peaks) are on the task's row whatever was thinned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfdist.jobs.dialect import Db
from tfdist.node.usage import near_limit as near_sample
from tfdist.states import size_text
from tfdist.supervisor.status import TaskStatus

if TYPE_CHECKING:
    from tfdist.jobs.store import JobRef, Op, Store

#: The backends whose tasks are sampled (where they run: node/usage.py); Ray's and
#: Kubernetes' are not (their dashboards and metrics servers have it).
SAMPLED_BACKENDS = ("local", "spark", "yarn")
#: The most samples the store keeps per task (even).
MAX_SAMPLES = 256
#: The most tasks whose samples the page draws (so at most 24 x 256 points): above it, the
#: ones near their memory limit and then the most memory.
CHART_TASKS = 24


@dataclass
class Thinning:
    """Which of a task's samples to keep: pure bookkeeping, no I/O (see the module's text)."""

    cap: int = MAX_SAMPLES
    stride: int = 1
    kept: int = 0
    next_seq: int = 0

    def add(self) -> tuple[int | None, int | None]:
        """A new sample: ``(seq, thin)``, ``seq`` its number if it is to be stored (None: not
        stored), ``thin`` a modulus when the stored ones must be thinned to those whose
        ``seq`` is a multiple of it (None: nothing to delete)."""
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        if seq % self.stride:
            return None, None
        self.kept += 1
        if self.kept <= self.cap:
            return seq, None
        self.stride *= 2  # keep the multiples of the new stride up to seq (seq among them or not)
        self.kept = seq // self.stride + 1
        return (seq if seq % self.stride == 0 else None), self.stride


def op_task_usage(job: str | JobRef, task: str, attempt: int, seq: int | None, thin: int | None,
                  sample: Mapping[str, Any], latest: Mapping[str, Any]) -> Op:
    """A usage sample of ``task``: stored as ``seq`` (None: not stored), the task's samples
    thinned to multiples of ``thin`` (None: none deleted), and ``latest`` (with the peaks)
    set on its row."""
    from tfdist.jobs.store import _id

    shown = json.dumps(dict(latest))

    def update(db: Db) -> None:
        job_id = _id(job)
        if thin is not None:
            db.execute("DELETE FROM usage_samples WHERE job_id = ? AND task = ? AND seq % ? <> 0",
                       (job_id, task, thin))
        if seq is not None:
            db.execute("INSERT INTO usage_samples (job_id, task, seq, attempt, time, cpu, rss, "
                       "mem_limit, charged) VALUES (?,?,?,?,?,?,?,?,?)",
                       (job_id, task, seq, attempt, sample["time"], sample["cpu"], sample["rss"],
                        sample["limit"], sample.get("charged")))
        db.execute("UPDATE tasks SET resource_use = ? WHERE job_id = ? AND name = ?",
                   (shown, job_id, task))

    return update


def chart_tasks(tasks: Sequence[TaskStatus], most: int = CHART_TASKS) -> list[str]:
    """The tasks whose samples the page draws: all of them up to ``most``; above that the
    ones near their memory limit first, then the most memory (their latest RSS)."""
    def key(t: TaskStatus) -> tuple[bool, float]:
        return (not near_limit(t.usage), -(_number(t.usage, "rss") or 0.0))

    return [t.name for t in sorted(tasks, key=key)[:most]]


def chart_data(store: Store, job_id: str, tasks: Sequence[str]) -> dict[str, Any]:
    """The kept samples of ``tasks`` (at most :data:`CHART_TASKS` x :data:`MAX_SAMPLES`
    rows, read along the primary key) as series: ``time``, ``cpu``, ``rss``, ``limit``."""
    names = list(tasks)[:CHART_TASKS]
    out: dict[str, dict[str, list[Any]]] = {}
    if names:
        rows = store.read(
            "read", "SELECT task, time, cpu, rss, mem_limit FROM usage_samples WHERE job_id = ? "
            f"AND task IN ({','.join('?' * len(names))}) ORDER BY task, seq", (job_id, *names))
        for r in rows:
            s = out.setdefault(r["task"], {"time": [], "cpu": [], "rss": [], "limit": []})
            s["time"].append(r["time"])
            s["cpu"].append(r["cpu"])
            s["rss"].append(r["rss"])
            s["limit"].append(r["mem_limit"])
    return {"tasks": out, "samples": sum(len(s["time"]) for s in out.values())}


def _number(u: Mapping[str, Any], key: str) -> float | None:
    v = u.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 else None


def cpu_text(u: Mapping[str, Any]) -> str:
    """``0.97 (peak 1.02)``: cores used now and at most (``-`` when not sampled)."""
    now, peak = _number(u, "cpu"), _number(u, "peak_cpu")
    if now is None and peak is None:
        return "-"
    return (f"{now:.2f}" if now is not None else "-") + (f" (peak {peak:.2f})" if peak is not None else "")


def memory_text(u: Mapping[str, Any]) -> str:
    """``1.2 GiB (peak 1.5 GiB)``: RSS now and at most; with a limit, what counts against
    it (the cgroup's charge when known, else the RSS) of the limit: ``1.2 GiB (peak 1.5
    GiB), 0.9 GiB of 2.0 GiB limit 45%``; ``-`` when not sampled."""
    rss, limit, peak = _number(u, "rss"), _number(u, "limit"), _number(u, "peak_rss")
    if rss is None:
        return "-"
    text = size_text(int(rss))
    if peak is not None and peak > rss:
        text += f" (peak {size_text(int(peak))})"
    if limit:
        used = _used(u)
        text += f", {size_text(int(used))} of {size_text(int(limit))} limit {used / limit:.0%}"
    return text


def _used(u: Mapping[str, Any]) -> float:
    charged = _number(u, "charged")
    return charged if charged is not None else _number(u, "rss") or 0.0


def near_limit(u: Mapping[str, Any]) -> bool:
    """Whether a task's latest sample is near its memory limit (node/usage.NEAR_LIMIT),
    comparing what the kernel charges it when known."""
    limit = _number(u, "limit")
    if _number(u, "rss") is None or not limit:
        return False
    return near_sample(int(_used(u)), int(limit))

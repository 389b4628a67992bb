"""Histories for the dashboard's tests and benchmark, written straight into a store:
many jobs, or one job of many tasks with attempts, transitions and progress."""

from __future__ import annotations

import time

from tfdist.jobs.store import (
    JobRef,
    Store,
    op_create_job,
    op_job_finished,
    op_job_running,
    op_task_progress,
    op_task_transition,
)
from tfdist.states import JobState, TaskState
from tfdist.supervisor.status import TaskStatus

STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.SUCCEEDED)
BACKENDS = ("local", "kubernetes", "ray", "spark")
USERS = ("alice", "bob", "carol")
TEAMS = ("vision", "nlp")


def many_jobs(store: Store, n: int, *, tasks: int = 2, start: float | None = None) -> None:
    """``n`` ended jobs (mixed states, backends, users), each with ``tasks`` tasks."""
    t0 = start or time.time() - n * 60
    ops = []
    for i in range(n):
        ref = JobRef()
        state = STATES[i % len(STATES)]
        when = t0 + i * 60
        ops.append(op_create_job(f"job-{i:05d}", name=f"train-{i % 37}", run_dir=f"/nonexistent/run-{i}",
                                 backend=BACKENDS[i % len(BACKENDS)], state=JobState.RUNNING,
                                 max_restarts=3, ref=ref, user=USERS[i % len(USERS)],
                                 labels={"team": TEAMS[i % len(TEAMS)], "exp": f"e{i % 5}"}))
        for k in range(tasks):
            ops.append(op_task_transition(ref, TaskStatus(f"worker-{k}", "worker", k, TaskState.SUCCEEDED,
                                                          exit_code=0, started_at=when, ended_at=when + 30), when + 30))
        cause = ({"task": "worker-1", "attempt": 0, "exit_code": 3, "description": "exit code 3",
                  "time": when + 30, "message": f"ValueError: bad batch {i}", "tail": ["Traceback", "ValueError"]}
                 if state is JobState.FAILED else None)
        ops.append(op_job_finished(ref, state=state, exit_code=state.exit_code, restarts_used=i % 2,
                                   root_cause=cause, metrics=None, ended_at=when + 31))
    for k in range(0, len(ops), 5000):
        store.write_batch(ops[k:k + 5000])


def big_job(store: Store, tasks: int, *, job_id: str = "big-job", run_dir: str = "/nonexistent/big",
            reports: int = 5) -> str:
    """One ended job of ``tasks`` workers, two attempts of worker-3, progress reports."""
    ref = JobRef()
    t0 = time.time()
    ops = [op_create_job(job_id, name="big", run_dir=run_dir, backend="local",
                         state=JobState.RUNNING, max_restarts=3, ref=ref),
           op_job_running(ref, 1, None)]
    for i in range(tasks):
        name = f"worker-{i}"
        if i == 3:
            ops.append(op_task_transition(ref, TaskStatus(name, "worker", i, TaskState.FAILED, attempt=0,
                                                          exit_code=1, started_at=t0, ended_at=t0 + 50,
                                                          reason="exit code 1"), t0 + 50))
        ops.append(op_task_transition(ref, TaskStatus(name, "worker", i, TaskState.SUCCEEDED,
                                                      attempt=1 if i == 3 else 0, restarts=int(i == 3),
                                                      exit_code=0, started_at=t0 + (60 if i == 3 else 1),
                                                      ended_at=t0 + 300, host="127.0.0.1", pid=10000 + i),
                                      t0 + 300))
        for r in range(reports):
            ops.append(op_task_progress(ref, name, 0, t0 + 10 + r * 50,
                                        {"step": (r + 1) * 10, "loss": 2.0 / (r + 1),
                                         "steps_per_sec": 10.0 if i != 7 else 3.0}))
    ops.append(op_job_finished(ref, state=JobState.SUCCEEDED, exit_code=0, restarts_used=1,
                               root_cause=None, metrics={"accuracy": 0.9}, ended_at=t0 + 301))
    for k in range(0, len(ops), 5000):
        store.write_batch(ops[k:k + 5000])
    return job_id


def job_inputs(store: Store, job_id: str, tasks: int, files: int = 10) -> None:
    """A data record for ``job_id``: one staged input of ``files`` files per task, as
    tfdist.data.plan.summary bounds what a run's plan names (the first few names per task)."""
    from tfdist.data import plan
    from tfdist.jobs.inputs import op_job_data

    shares = {f"worker-{i}": {"train": [f"hdfs://nn/clicks/part-{i:05d}-{k:03d}" for k in range(files)]}
              for i in range(tasks)}
    store.write("update", op_job_data(job_id, plan.summary({
        "inputs": {"train": {"mode": "stage", "files": tasks * files, "bytes": tasks * files * 2**26}},
        "outputs": {"model_dir": "hdfs://nn/models/big"}, "writer": "worker-0", "tasks": shares,
        "bytes": {t: {"train": files * 2**26} for t in shares}})))


def usage_samples(store: Store, job_id: str, tasks: int, per_task: int = 256, *,
                  limit: int | None = 2 << 30) -> None:
    """``per_task`` resource samples (the most the store keeps per task) for each of
    ``tasks`` workers of ``job_id``, and each task's latest on its row: one multi-row
    INSERT per task (as many rows one at a time would take PostgreSQL minutes to seed)."""
    import json

    from tfdist.jobs.dialect import Db

    t0 = time.time() - per_task * 5

    def write(db: Db) -> None:
        for i in range(tasks):
            name = f"worker-{i}"
            rows = [(job_id, name, seq, 0, t0 + seq * 5, 0.5 + (seq % 7) / 10, (100 + seq) << 20, limit)
                    for seq in range(per_task)]
            db.execute("INSERT INTO usage_samples (job_id, task, seq, attempt, time, cpu, rss, mem_limit) "
                       "VALUES " + ",".join(["(?,?,?,?,?,?,?,?)"] * len(rows)),
                       tuple(v for row in rows for v in row))
            last = rows[-1]
            db.execute("UPDATE tasks SET resource_use = ? WHERE job_id = ? AND name = ?",
                       (json.dumps({"time": last[4], "cpu": last[5], "rss": last[6], "limit": limit,
                                    "peak_rss": last[6], "peak_cpu": 1.1}), job_id, name))

    store.write("seed", write)

"""The job store on its own: concurrency, lost supervisors, prefixes, bad store files."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist
from tfdist.errors import StoreError
from tfdist.jobs.liveness import effective_state
from tfdist.jobs.records import JobRecord
from tfdist.jobs.store import Store, op_task_progress, op_task_transition
from tfdist.pids import start_time
from tfdist.states import JobState, TaskState
from tfdist.supervisor.status import TaskStatus


def _task(name: str, state: TaskState = TaskState.RUNNING) -> TaskStatus:
    return TaskStatus(name=name, role="worker", index=int(name[-1]), state=state, pid=1,
                      host="127.0.0.1", started_at=time.time())


def _writer(i: int) -> None:
    store = Store()
    job_id = store.create_job("same-name", name="same", run_dir=f"/runs/{i}", backend="local",
                              state="running")
    for k in range(10):
        store.write("update", op_task_transition(job_id, _task("worker-0"), time.time()))
        store.write("update", op_task_progress(job_id, "worker-0", 0, time.time(), {"step": k}))


@pytest.mark.integration
def test_20_concurrent_writer_processes_lose_nothing(store_kind: str) -> None:
    ctx = multiprocessing.get_context("fork")  # each opens its own connection, like 20 tfdist commands
    procs = [ctx.Process(target=_writer, args=(i,)) for i in range(20)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 20
    store = Store()
    jobs = store.jobs()
    assert len(jobs) == 20
    # Every writer asked for the same id: each got its own, the first one unsuffixed.
    ids = {j.id for j in jobs}
    assert len(ids) == 20 and "same-name" in ids and "same-name-20" in ids
    assert all(len(store.progress(i)) == 10 for i in ids)
    assert all(len(store.transitions(i)) == 11 for i in ids)  # job created + 10 task changes
    if store_kind == "sqlite":
        assert store.read("check", "PRAGMA journal_mode")[0]["journal_mode"] == "wal"


def test_lost_when_the_supervisor_is_gone_or_its_pid_reused(store_kind: str) -> None:
    store = Store()
    me = os.getpid()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    store.create_job("alive", name="a", run_dir="/r/a", backend="local", state="running",
                     supervisor_pid=me, supervisor_start=start_time(me))
    store.create_job("dead", name="d", run_dir="/r/d", backend="local", state="running",
                     supervisor_pid=int(dead), supervisor_start=time.time())
    store.create_job("reused", name="r", run_dir="/r/r", backend="local", state="running",
                     supervisor_pid=me, supervisor_start=start_time(me) - 3600)
    store.create_job("done", name="x", run_dir="/r/x", backend="local", state="succeeded")
    states = {j.id: j.state for j in store.jobs()}
    assert states == {"alive": "running", "dead": "lost", "reused": "lost", "done": "succeeded"}
    # A submitted job whose supervisor never registered is lost only after a grace period.
    fresh = JobRecord("f", "f", JobState.SUBMITTED, submitted_at=time.time())
    assert effective_state(fresh) is JobState.SUBMITTED
    assert effective_state(dataclasses.replace(fresh, submitted_at=time.time() - 3600)) is JobState.LOST


def test_unique_prefix_resolves_and_ambiguous_or_unknown_is_one_line(store_kind: str) -> None:
    store = Store()
    for i, name in enumerate(["mnist-20250101-120000", "mnist-20250101-120001", "cifar-20250101"]):
        store.create_job(name, name=name.split("-")[0], run_dir=f"/r/{i}", backend="local",
                         state="succeeded")
    assert store.job("cif").id == "cifar-20250101"
    assert store.job("mnist-20250101-120001").id == "mnist-20250101-120001"
    with pytest.raises(StoreError, match="matches 2 jobs"):
        store.job("mnist")
    with pytest.raises(StoreError, match="no job 'resnet'"):
        store.job("resnet")
    with pytest.raises(StoreError, match="no job 'mnist_'"):  # LIKE wildcards are literal
        store.job("mnist_")
    with pytest.raises(StoreError, match="no job 'mnist%'"):
        store.job("mnist%")


def test_corrupt_store_is_one_clear_line_and_run_still_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "jobs.db").write_bytes(b"this is not a database, it is a shopping list\n" * 100)
    env = {"TFDIST_HOME": str(home)}
    for args in (["list"], ["status", "x"], ["submit", "--workers", "1", "--", "python", str(BIN / "ok.py")]):
        proc = tfdist(*args, env=env, cwd=tmp_path)
        assert proc.returncode == 1, args
        assert "Traceback" not in proc.stderr
        assert proc.stderr.strip().count("\n") == 0, proc.stderr
        # a text file is said for what it is, not called a damaged store (issue 40)
        assert "is not an SQLite database" in proc.stderr and "is damaged" not in proc.stderr, proc.stderr
        assert "away to start a new store there" in proc.stderr
    assert not (tmp_path / "tfdist-runs").exists() or not any((tmp_path / "tfdist-runs").iterdir())
    # A foreground run is not refused because of the store: it warns and runs.
    proc = tfdist("run", "-q", "--workers", "1", "--", "python", str(BIN / "ok.py"), env=env, cwd=tmp_path)
    assert proc.returncode == 0
    assert "warning: this job is not recorded" in proc.stderr


def test_locked_store_is_one_clear_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    Store(home / "jobs.db").close()
    holder = sqlite3.connect(str(home / "jobs.db"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        proc = tfdist("submit", "--workers", "1", "--", "python", str(BIN / "ok.py"),
                      env={"TFDIST_HOME": str(home), "TFDIST_STORE_TIMEOUT": "0.5"}, cwd=tmp_path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "is locked by another process" in proc.stderr and "try again" in proc.stderr
    runs = tmp_path / "tfdist-runs"
    assert not runs.exists() or [p.name for p in runs.iterdir()] == ["pending"] or not any(runs.iterdir())


def test_a_supervisor_that_raises_is_recorded_failed_not_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_kind: str
) -> None:
    from tfdist import api
    from tfdist.errors import BackendError
    from tfdist.jobspec import load
    from tfdist.supervisor.loop import Supervisor

    def broken(self: Supervisor) -> None:
        raise BackendError("could not reserve a port on 127.0.0.1: no ports left")

    monkeypatch.setattr(Supervisor, "run", broken)
    job = load.quick([sys.executable, str(BIN / "ok.py")], name="broken", workers=1)
    with pytest.raises(BackendError):
        api.run(job, options=api.BackendOptions(runs_root=tmp_path), quiet=True)
    [row] = Store().jobs()
    assert row.state is JobState.FAILED and row.ended_at is not None
    assert "no ports left" in (Store().transitions(row.id)[-1].reason or "")

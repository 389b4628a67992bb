"""The PostgreSQL store against a real server (tests/postgres_server.py): its write lock, a
lost connection, an unreachable server, bad TFDIST_STORE values, an old SQLite store brought
up to date, and migrating a history from SQLite. The store's other tests run on both stores
(the ``store_kind`` fixture)."""

from __future__ import annotations

import json
import os
import pwd
import socket
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist
from tests.jobs.store_helpers import wait_until
from tfdist.jobs.store import JobRef, Store, op_create_job, op_task_progress, op_task_transition
from tfdist.jobs.store_postgres import WRITE_LOCK
from tfdist.jobs.tables import SCHEMA_VERSION
from tfdist.jobs.writer import StoreWriter
from tfdist.states import JobState, TaskState
from tfdist.supervisor.status import TaskStatus

pytestmark = pytest.mark.postgres


def _one_line(proc, *needles: str, code: int = 1) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("tfdist: error: "), proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def _password(url: str) -> str:
    return url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def test_a_held_write_lock_is_one_line_and_the_writer_catches_up(postgres_store: str) -> None:
    import psycopg

    Store().close()  # the schema exists
    holder = psycopg.connect(postgres_store, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (WRITE_LOCK,))  # another tfdist writing
    try:
        proc = tfdist("submit", "--workers", "1", "--", sys.executable, str(BIN / "ok.py"),
                      env={"TFDIST_STORE_TIMEOUT": "0.5"})
        _one_line(proc, "is locked by another process", "try again")
        assert _password(postgres_store) not in proc.stderr and ":***@" in proc.stderr
        writer = StoreWriter(Store(timeout=0.2))
        ref = JobRef()
        writer.submit(op_create_job("held", name="held", run_dir="/r/held", backend="local",
                                    state=JobState.RUNNING, ref=ref))
        for i in range(50):
            writer.submit(op_task_progress(ref, "worker-0", 0, float(i), {"step": i}))
        error = wait_until(lambda: writer.last_error, what="a write to meet the lock")
        assert error.kind == "locked" and writer.pending == 51
    finally:
        holder.execute("SELECT pg_advisory_unlock(%s)", (WRITE_LOCK,))
        holder.close()
    assert writer.close(timeout=60) and writer.written == 51
    assert [r["step"] for r in Store().progress("held")] == list(range(50))
    assert [j.id for j in Store().jobs()] == ["held"]  # the refused submit recorded nothing


def test_a_lost_connection_is_retried_and_reconnected(postgres_store: str) -> None:
    """The server ends the writer's session (as a restart or a cut link would): the write
    fails as transient, and the next try reconnects and lands."""
    import psycopg

    store = Store()
    writer = StoreWriter(store)
    ref = JobRef()
    writer.submit(op_create_job("cut", name="cut", run_dir="/r/cut", backend="local",
                                state=JobState.RUNNING, ref=ref))
    assert writer.flush(30)
    with psycopg.connect(postgres_store, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
            "'tfdist' AND pid <> pg_backend_pid()").fetchall()
    assert killed
    writer.submit(op_task_transition(ref, TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED,
                                                     exit_code=0), time.time()))
    assert writer.close(timeout=60) and writer.dropped == 0
    assert {t.name: t.state for t in Store().tasks("cut")} == {"worker-0": TaskState.SUCCEEDED}


def test_an_unreachable_server_and_bad_store_settings_are_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port on loopback where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://me:hunter2@127.0.0.1:{port}/jobs"
    proc = tfdist("list", env={"TFDIST_STORE": url})
    _one_line(proc, "cannot be reached", "127.0.0.1", "check that it runs")
    assert "hunter2" not in proc.stderr
    for args in (["list"], ["run", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--",
                            sys.executable, str(BIN / "ok.py")]):
        _one_line(tfdist(*args, env={"TFDIST_STORE": "mysql://x@y/z"}), "TFDIST_STORE",
                  "postgresql://", code=2)
    assert not (tmp_path / "runs").exists()  # nothing started or written


def test_a_version_1_sqlite_store_is_brought_up_to_date(tmp_path: Path) -> None:
    """A store made before jobs recorded their user: opened, it gains the column and the
    dashboard's indexes, and its jobs are its owner's (this user's)."""
    path = tmp_path / "old.db"
    Store(path).create_job("old", name="old", run_dir="/r/old", backend="local",
                           state=JobState.SUCCEEDED)
    db = sqlite3.connect(str(path))
    for index in ("jobs_submitted", "jobs_state", "jobs_name", "jobs_username", "jobs_backend"):
        db.execute(f"DROP INDEX {index}")
    db.execute("ALTER TABLE jobs DROP COLUMN username")
    db.execute("ALTER TABLE jobs DROP COLUMN goodput")  # version 3's
    db.execute("ALTER TABLE jobs DROP COLUMN phase")  # version 4's
    db.execute("ALTER TABLE jobs DROP COLUMN labels")  # version 6's
    db.execute("ALTER TABLE tasks DROP COLUMN resource_use")  # version 5's
    db.execute("ALTER TABLE jobs DROP COLUMN data")  # version 7's
    db.execute("DROP TABLE usage_samples")
    db.execute("DROP TABLE task_inputs")  # version 7's
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    store = Store(path)
    [job] = store.jobs()
    assert job.id == "old" and job.user == pwd.getpwuid(os.getuid()).pw_name
    names = {r["name"] for r in store.read("check", "SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"jobs_submitted", "jobs_username"} <= names
    assert store.read("check", "PRAGMA user_version")[0]["user_version"] == SCHEMA_VERSION
    columns = {r["name"] for r in store.read("check", "PRAGMA table_info(jobs)")}
    assert {"username", "goodput", "phase", "labels", "data"} <= columns  # versions 2, 3, 4, 6, 7 on the way
    assert job.labels == {}
    assert "resource_use" in {r["name"] for r in store.read("check", "PRAGMA table_info(tasks)")}  # 5
    assert store.read("check", "SELECT COUNT(*) AS n FROM task_inputs")[0]["n"] == 0  # 7


@pytest.mark.integration
def test_migrate_copies_a_real_history_once(tmp_path: Path, postgres_server) -> None:  # type: ignore[no-untyped-def]
    """A real job (tasks, attempts, transitions, progress) and a synthetic one in the SQLite
    store; ``tfdist store migrate`` copies them; ``status --json`` reads the same from both;
    a second migrate copies nothing."""
    env_sqlite = {"TFDIST_STORE": ""}
    proc = tfdist("run", "-q", "--runs-dir", str(tmp_path / "runs"), "--workers", "2", "--name", "mig",
                  "--set", "restart.policy=on-failure", "--", sys.executable, str(BIN / "flaky.py"),
                  env=env_sqlite)
    store = Store(Path(os.environ["TFDIST_HOME"]) / "jobs.db")
    store.create_job("synthetic", name="syn", run_dir="/r/syn", backend="ray", state=JobState.FAILED)
    for i in range(12):
        store.write("update", op_task_progress("synthetic", "worker-0", 0, 100.0 + i, {"step": i, "loss": 1 / (i + 1)}))
    jobs = [j.id for j in store.jobs()]
    assert len(jobs) == 2, (proc.returncode, proc.stderr)
    url = postgres_server.create_database("migrated")
    try:
        out = tfdist("store", "migrate", "--to", url, env=env_sqlite)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("copied 2 jobs") and _password(url) not in out.stdout
        for job in jobs:
            a = json.loads(tfdist("status", job, "--json", env=env_sqlite).stdout)
            b = json.loads(tfdist("status", job, "--json", env={"TFDIST_STORE": url}).stdout)
            for row in a["transitions"] + b["transitions"]:
                row.pop("id")
            assert a == b and a["user"] == pwd.getpwuid(os.getuid()).pw_name
        real = json.loads(tfdist("status", "mig", "--json", env={"TFDIST_STORE": url}).stdout)
        assert real["state"] == "succeeded" and max(x["attempt"] for x in real["attempts"]) == 1
        metrics = tfdist("metrics", "synthetic", "--format", "json", env={"TFDIST_STORE": url})
        assert [r["step"] for r in json.loads(metrics.stdout)] == list(range(12))
        again = tfdist("store", "migrate", "--to", url, env=env_sqlite)
        assert again.returncode == 0 and "copied 0 jobs" in again.stdout and "2 already there" in again.stdout
        assert len(json.loads(tfdist("list", "--json", env={"TFDIST_STORE": url}).stdout)) == 2
        _one_line(tfdist("store", "migrate", "--to", "nope://x", env=env_sqlite), "--to", code=2)
    finally:
        postgres_server.drop_database("migrated")


def test_labels_are_stored_and_filtered_exactly(store_kind: str) -> None:
    """A job's labels round-trip; the filter matches a whole key and a whole value, case
    and all, on both stores (SQLite's LIKE ignores case: the query must not rely on it)."""
    from tfdist.jobs.queries import JobFilter, jobs_page

    store = Store()
    store.create_job("a", name="a", run_dir="/r/a", backend="local", state=JobState.SUCCEEDED,
                     labels={"team": "vision", "example.com/exp": "a_1"})
    store.create_job("b", name="b", run_dir="/r/b", backend="local", state=JobState.SUCCEEDED,
                     labels={"team": "Vision", "exp": "a%1"})
    store.create_job("c", name="c", run_dir="/r/c", backend="local", state=JobState.SUCCEEDED)
    assert store.job("a").labels == {"team": "vision", "example.com/exp": "a_1"}
    assert store.job("c").labels == {}

    def ids(*labels: tuple[str, str]) -> list[str]:
        rows, total = jobs_page(store, JobFilter(labels=labels), 50)
        assert total == len(rows)
        return sorted(r.id for r in rows)

    assert ids(("team", "vision")) == ["a"] and ids(("team", "Vision")) == ["b"]
    assert ids(("example.com/exp", "a_1")) == ["a"] and ids(("exp", "a_1")) == []
    assert ids(("exp", "a%1")) == ["b"] and ids(("exp", "a")) == [] and ids(("eam", "vision")) == []
    assert ids(("team", "vision"), ("example.com/exp", "a_1")) == ["a"]
    assert ids(("team", "vision"), ("exp", "a%1")) == []
    assert ids() == ["a", "b", "c"]
    # a row written by other means: what is no label is not shown (no markup, no escapes)
    store.write("update", lambda db: db.execute(
        "UPDATE jobs SET labels = ? WHERE id = 'c'",
        ('{"ok":"yes","[red]x":"1","k":"\\u001b[31m","n":3}',)))
    assert store.job("c").labels == {"ok": "yes"}
    store.close()


def _shown(tasks: int, files: int) -> dict:
    """A plan's bounded view as tfdist.data.plan.summary makes it, of ``files`` files dealt
    over ``tasks`` workers, one of them named as a hostile listing could name it."""
    from tfdist.data import plan as data_plan

    names = [f"/d/part-{i}" for i in range(files)]
    names[0] = "/d/<img src=x onerror=alert(1)>\x1b[31m\nfake line"
    dealt = {f"worker-{t}": {"train": names[t::tasks]} for t in range(tasks)}
    return data_plan.summary({
        "inputs": {"train": {"mode": "stage", "files": files, "bytes": files * 10}},
        "outputs": {"model_dir": "hdfs://nn/m"}, "writer": "worker-0", "tasks": dealt,
        "bytes": {t: {"train": len(share["train"]) * 10} for t, share in dealt.items()}})


def test_which_files_each_task_got_is_stored_bounded(store_kind: str) -> None:
    """A job's data round-trips on both stores: each input's totals, the outputs, and per
    task its count, bytes and first names only (10,000 files cost 3 names a task); a page
    reads only the tasks it asks for; deleting the job deletes them; rows written by other
    means with other shapes are read as missing, not as markup or a crash."""
    from tfdist.data.plan import FIRST_FILES
    from tfdist.jobs.inputs import job_data, op_job_data

    store = Store()
    store.create_job("d", name="d", run_dir="/r/d", backend="local", state=JobState.RUNNING)
    store.create_job("none", name="n", run_dir="/r/n", backend="local", state=JobState.RUNNING)
    store.write("update", op_job_data("d", _shown(tasks=250, files=10_000)))
    got = job_data(store, "d", ["worker-1", "worker-0", "worker-249", "ps-0"])
    assert got is not None and got["tasks_total"] == 250
    assert got["inputs"] == {"train": {"mode": "stage", "files": 10_000, "bytes": 100_000}}
    assert got["outputs"] == {"model_dir": "hdfs://nn/m"} and got["writer"] == "worker-0"
    assert list(got["tasks"]) == ["worker-1", "worker-0", "worker-249"]  # as asked; ps-0 got none
    w0 = got["tasks"]["worker-0"]["train"]
    assert w0["files"] == 40 and w0["bytes"] == 400 and len(w0["first"]) == FIRST_FILES
    assert w0["first"][0].startswith("/d/<img") and w0["first"][1] == "/d/part-250"
    stored = store.read("check", "SELECT COUNT(*) AS n FROM task_inputs WHERE job_id = 'd'")[0]["n"]
    assert stored == 250  # one row per task and input, whatever the number of files
    assert job_data(store, "none", ["worker-0"]) is None
    # recorded again (a resubmitted record): replaced, not doubled
    store.write("update", op_job_data("d", _shown(tasks=2, files=4)))
    assert job_data(store, "d", ["worker-0", "worker-1"])["tasks_total"] == 2  # type: ignore[index]
    store.write("update", lambda db: db.execute(
        "UPDATE task_inputs SET first = ?, bytes = ? WHERE task = 'worker-1'", ('{"x": 1}', -5)))
    store.write("update", lambda db: db.execute(
        "UPDATE jobs SET data = ? WHERE id = 'none'", ('[1, 2]',)))
    odd = job_data(store, "d", ["worker-1"])["tasks"]["worker-1"]["train"]  # type: ignore[index]
    assert odd == {"files": 2, "bytes": None, "first": []}
    assert job_data(store, "none", ["worker-0"]) is None
    store.delete_job("d")
    assert store.read("check", "SELECT COUNT(*) AS n FROM task_inputs")[0]["n"] == 0
    store.close()


def test_a_version_6_postgres_store_gains_the_data_of_version_7(postgres_store: str) -> None:
    """A store made by the tfdist before jobs kept their data: opened, it gains ``jobs.data``
    and ``task_inputs`` and its jobs read as having no data."""
    from tfdist.jobs.inputs import job_data

    store = Store()
    store.create_job("old", name="old", run_dir="/r/old", backend="local", state=JobState.SUCCEEDED)

    def downgrade(db):  # type: ignore[no-untyped-def]
        db.execute("ALTER TABLE jobs DROP COLUMN data")
        db.execute("DROP TABLE task_inputs")
        db.execute("UPDATE tfdist_schema SET version = 6")

    store.write("downgrade", downgrade)
    store.close()
    store = Store()
    assert store.read("check", "SELECT MAX(version) AS v FROM tfdist_schema")[0]["v"] == SCHEMA_VERSION == 7
    assert job_data(store, "old", ["worker-0"]) is None
    assert store.job("old").name == "old"
    store.close()


def test_migrate_keeps_each_tasks_files_and_resource_use(tmp_path: Path, postgres_store: str) -> None:
    """``tfdist store migrate`` brings a job's data (jobs.data, task_inputs) and its resource
    use (each task's latest and peaks, the kept samples) to PostgreSQL with the rest."""
    from tfdist.jobs.inputs import job_data, op_job_data
    from tfdist.jobs.migrate import migrate
    from tfdist.jobs.usage import op_task_usage

    source = Store(tmp_path / "jobs.db")
    source.create_job("d", name="d", run_dir="/r/d", backend="local", state=JobState.SUCCEEDED)
    source.write("update", op_task_transition("d", TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED), 1.0))
    source.write("update", op_job_data("d", _shown(tasks=2, files=10)))
    sample = {"time": 2.0, "cpu": 0.5, "rss": 1 << 20, "limit": None, "charged": None}
    source.write("update", op_task_usage("d", "worker-0", 0, 0, None, sample, {**sample, "peak_rss": 1 << 20}))
    target = Store(postgres_store)
    result = migrate(source, target)
    assert result.copied["task_inputs"] == 2 and result.copied["usage_samples"] == 1
    assert job_data(target, "d", ["worker-0", "worker-1"]) == job_data(source, "d", ["worker-0", "worker-1"])
    assert target.tasks("d")[0].usage == source.tasks("d")[0].usage != {}
    source.close()
    target.close()

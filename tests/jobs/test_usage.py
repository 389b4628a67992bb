"""Resource use: the sampler's pure parts (a ``stat`` line, a process tree, a CPU share),
the bounding of the samples kept per task, the texts ``status`` and the page show, an
agent's hostile usage message, the samples in the store (both stores), and a real local
job whose samples land in the store and are shown by ``status``."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import tfdist
from tfdist.backends.agent.backend import usage_event
from tfdist.jobs import usage as jobs_usage
from tfdist.jobs.store import Store
from tfdist.jobs.tables import SCHEMA_VERSION
from tfdist.jobs.usage import Thinning, chart_data, op_task_usage
from tfdist.node import usage
from tfdist.node.usage import ProcStat, Sampler, UsageSample
from tfdist.states import JobState, TaskState
from tfdist.supervisor.status import TaskStatus

# -- the sampler's pure parts ----------------------------------------------------------------


def _stat_line(pid: int, name: str, ppid: int, utime: int, stime: int, rss: int) -> str:
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 8 + [str(rss)] + ["0"] * 20
    return f"{pid} ({name}) " + " ".join(fields)


def test_a_stat_line_is_read_after_the_last_parenthesis_of_the_name() -> None:
    st = usage.parse_stat(_stat_line(42, "evil) S 1 (x", 7, 100, 50, 300))
    assert st == ProcStat(42, 7, 150, 300)
    assert usage.parse_stat("garbage") is None
    assert usage.parse_stat("12 (x) S") is None


def test_a_tree_is_the_root_and_its_descendants_only() -> None:
    stats = {p.pid: p for p in (ProcStat(10, 1, 5, 1), ProcStat(11, 10, 5, 1), ProcStat(12, 11, 5, 1),
                                ProcStat(20, 1, 5, 1), ProcStat(21, 20, 5, 1))}
    assert sorted(p.pid for p in usage.tree(10, stats)) == [10, 11, 12]
    assert usage.tree(99, stats) == []


def test_cpu_share_is_cores_between_two_readings_and_never_negative() -> None:
    assert usage.cpu_share(None, (10.0, 500), 100) is None
    assert usage.cpu_share((10.0, 0), (12.0, 300), 100) == pytest.approx(1.5)
    assert usage.cpu_share((10.0, 300), (12.0, 100), 100) == 0.0  # a child that ended took its ticks
    assert usage.cpu_share((10.0, 0), (10.0, 100), 100) is None


def test_the_sampler_follows_each_tasks_tree_and_starts_over_for_a_new_pid() -> None:
    now = [100.0]
    tables = [
        {10: ProcStat(10, 1, 0, 10), 11: ProcStat(11, 10, 0, 5)},
        {10: ProcStat(10, 1, 100, 10), 11: ProcStat(11, 10, 100, 20)},
        {30: ProcStat(30, 1, 500, 1)},
    ]
    sampler = Sampler(read=lambda: tables.pop(0), clock=lambda: now[0], page=4096, ticks_per_second=100)
    first = sampler.sample({"worker-0": (10, 1 << 20)})
    assert first["worker-0"] == UsageSample(100.0, None, 15 * 4096, 1 << 20)
    now[0] = 102.0
    second = sampler.sample({"worker-0": (10, 1 << 20)})
    assert second["worker-0"].cpu == pytest.approx(1.0) and second["worker-0"].rss == 30 * 4096
    now[0] = 104.0
    third = sampler.sample({"worker-0": (30, None)})  # a new attempt: no share from the old pid
    assert third["worker-0"].cpu is None and third["worker-0"].limit is None


def test_the_real_proc_sees_this_process() -> None:
    mine = usage.read_stats().get(os.getpid())
    assert mine is not None and mine.rss_pages > 0


def test_the_interval_is_checked_and_zero_turns_sampling_off() -> None:
    assert usage.interval({}) == usage.INTERVAL
    assert usage.interval({usage.INTERVAL_VAR: "0"}) == 0
    assert usage.interval({usage.INTERVAL_VAR: "0.5"}) == 0.5
    for bad in ("-1", "nan", "inf", "x", "0.01", "1e9"):
        with pytest.raises(ValueError, match=usage.INTERVAL_VAR):
            usage.interval({usage.INTERVAL_VAR: bad})


def test_latest_keeps_the_peaks_and_the_limit_compares_the_charge_when_known() -> None:
    a = usage.latest(None, UsageSample(1.0, None, 100, 1000))
    b = usage.latest(a, UsageSample(2.0, 0.5, 50, 1000, charged=950))
    assert b["peak_rss"] == 100 and b["peak_cpu"] == 0.5 and b["rss"] == 50
    assert UsageSample(2.0, 0.5, 50, 1000, charged=950).near_limit()
    assert not UsageSample(2.0, 0.5, 950, 1000, charged=10).near_limit()
    assert UsageSample(2.0, 0.5, 950, 1000).near_limit()
    assert not UsageSample(2.0, 0.5, 10**12, None).near_limit()


# -- bounding ----------------------------------------------------------------------------------


def _replay(cap: int, n: int) -> list[int]:
    """The seqs a store would hold after ``n`` samples under :class:`Thinning`."""
    kept: list[int] = []
    thinning = Thinning(cap=cap)
    for _ in range(n):
        seq, thin = thinning.add()
        if thin is not None:
            kept = [s for s in kept if s % thin == 0]
        if seq is not None:
            kept.append(seq)
        assert len(kept) == thinning.kept <= cap
    return kept


@pytest.mark.parametrize("n", [1, 7, 8, 9, 100, 1000, 12345])
def test_thinning_keeps_at_most_the_cap_evenly_over_the_whole_life(n: int) -> None:
    kept = _replay(8, n)
    assert kept[0] == 0 and len(kept) <= 8
    gaps = {b - a for a, b in zip(kept, kept[1:], strict=False)}
    assert len(gaps) <= 1  # evenly spaced
    if n > 8:
        assert len(kept) >= 4 and kept[-1] > (n - 1) - (n - 1) // 4  # the recent past is covered


# -- texts -------------------------------------------------------------------------------------


def test_texts_for_status_and_the_page() -> None:
    u = {"cpu": 0.973, "peak_cpu": 1.2, "rss": 3 << 29, "peak_rss": 2 << 30, "limit": 2 << 30,
         "charged": 1 << 30}
    assert jobs_usage.cpu_text(u) == "0.97 (peak 1.20)"
    assert jobs_usage.memory_text(u) == "1.5 GiB (peak 2 GiB), 1 GiB of 2 GiB limit 50%"
    assert not jobs_usage.near_limit(u)
    assert jobs_usage.near_limit({**u, "charged": int(1.9 * (1 << 30))})
    assert jobs_usage.cpu_text({}) == "-" and jobs_usage.memory_text({}) == "-"
    hostile = {"cpu": "1; DROP", "rss": True, "limit": -5, "charged": [1]}
    assert jobs_usage.cpu_text(hostile) == "-" and jobs_usage.memory_text(hostile) == "-"
    assert not jobs_usage.near_limit(hostile)


def test_the_chart_draws_the_tasks_near_their_limit_then_the_most_memory() -> None:
    def t(name: str, rss: int, charged: int | None = None) -> TaskStatus:
        return TaskStatus(name, "worker", 0, TaskState.RUNNING,
                          usage={"rss": rss, "limit": 1000, "charged": charged})

    tasks = [t("a", 10), t("b", 500), t("c", 100, charged=950), t("d", 700), TaskStatus("e", "worker", 1)]
    assert jobs_usage.chart_tasks(tasks, most=3) == ["c", "d", "b"]
    assert len(jobs_usage.chart_tasks(tasks)) == 5


def test_an_agents_usage_message_is_checked() -> None:
    assert usage_event("w", 0, 1.0, {"cpu": 0.5, "rss": 100}) is not None
    assert usage_event("w", 0, 1.0, {"cpu": None, "rss": 100}) is not None
    for bad in ({"cpu": 0.5}, {"cpu": 0.5, "rss": -1}, {"cpu": "x", "rss": 1}, {"cpu": 0.5, "rss": 1.5},
                {"cpu": float("nan"), "rss": 1}, {"cpu": True, "rss": 1}, {"cpu": 1, "rss": False}):
        assert usage_event("w", 0, 1.0, bad) is None, bad


# -- the store (both) ------------------------------------------------------------------------


def _job_with_task(store: Store, job_id: str) -> None:
    store.create_job(job_id, name=job_id, run_dir=f"/r/{job_id}", backend="local", state=JobState.RUNNING)
    from tfdist.jobs.store import op_task_transition

    store.write("update", op_task_transition(job_id, TaskStatus("worker-0", "worker", 0, TaskState.RUNNING,
                                                                host="h1"), time.time()))


def test_samples_are_stored_bounded_and_served_for_charts(store_kind: str) -> None:
    store = Store()
    _job_with_task(store, "u")
    thinning, before = Thinning(cap=16), None
    for i in range(100):
        sample = UsageSample(1000.0 + i, 0.5, 1000 + i, 4000, charged=900 + i)
        before = usage.latest(before, sample)
        seq, thin = thinning.add()
        store.write("update", op_task_usage("u", "worker-0", 0, seq, thin, sample.to_dict(), before))
    rows = store.read("read", "SELECT seq FROM usage_samples WHERE job_id = ? ORDER BY seq", ("u",))
    assert 0 < len(rows) <= 16 and rows[0]["seq"] == 0
    [task] = store.tasks("u")
    assert task.usage["rss"] == 1099 and task.usage["peak_rss"] == 1099 and task.usage["charged"] == 999
    data = chart_data(store, "u", ["worker-0", "worker-9"])
    series = data["tasks"]["worker-0"]
    assert len(series["time"]) == len(rows) == data["samples"] and list(data["tasks"]) == ["worker-0"]
    assert series["limit"][0] == 4000 and series["rss"][0] == 1000 and series["time"] == sorted(series["time"])
    assert chart_data(store, "u", [])["tasks"] == {}
    store.delete_job("u")
    assert not store.read("read", "SELECT seq FROM usage_samples WHERE job_id = ?", ("u",))


def test_a_version_4_store_is_brought_up_to_date_and_keeps_its_tasks(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE usage_samples")
    db.execute("ALTER TABLE tasks DROP COLUMN resource_use")
    db.execute("ALTER TABLE jobs DROP COLUMN labels")  # version 6's
    db.execute("ALTER TABLE jobs DROP COLUMN data")  # version 7's
    db.execute("DROP TABLE task_inputs")  # version 7's
    db.execute("INSERT INTO tasks (job_id, name, role, idx, state) VALUES ('j', 'worker-0', 'worker', 0, 'running')")
    db.execute("PRAGMA user_version=4")
    db.commit()
    db.close()
    store = Store(path)
    assert store.read("read", "SELECT resource_use FROM tasks")[0]["resource_use"] is None
    assert store.read("read", "SELECT COUNT(*) AS n FROM usage_samples")[0]["n"] == 0
    assert store.tasks("j")[0].usage == {}
    assert SCHEMA_VERSION == 7


# -- a real job on the local backend ----------------------------------------------------------

_BURN = ("import time, os\n"
         "data = bytearray(48 << 20)\n"
         "for i in range(0, len(data), 4096): data[i] = 1\n"
         "d = os.environ['TFDIST_RUN_DIR']\n"
         "while not os.path.exists(os.path.join(d, 'go')): sum(range(20000))\n")


@pytest.mark.integration
def test_a_running_local_tasks_samples_land_in_the_store_and_status_shows_them(tmp_path: Path) -> None:
    script = tmp_path / "burn.py"
    script.write_text(_BURN)
    cli = tfdist("submit", "--name", "use", "--workers", "1", "--runs-dir", str(tmp_path / "runs"),
                 "--", sys.executable, str(script), env={usage.INTERVAL_VAR: "0.3"}, cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    job_id = None
    deadline = time.monotonic() + 90
    task: TaskStatus | None = None
    while time.monotonic() < deadline:
        with contextlib.closing(Store()) as store:
            jobs = store.jobs()
            if jobs:
                job_id = jobs[0].id
                tasks = store.tasks(job_id)
                task = tasks[0] if tasks else None
                kept = store.read("read", "SELECT COUNT(*) AS n FROM usage_samples WHERE job_id = ?",
                                  (job_id,))[0]["n"]
                if task and task.usage.get("cpu") is not None and kept >= 3 and task.usage["rss"] > 48 << 20:
                    break
        time.sleep(0.3)
    assert job_id is not None and task is not None, "the job was not recorded"
    assert task.usage.get("rss", 0) > 48 << 20, task.usage  # its 48 MiB, touched
    assert task.usage["cpu"] > 0.05, task.usage  # it spins
    status = tfdist("status", job_id)
    as_json = tfdist("status", job_id, "--json")
    run_dir = Path(json.loads(as_json.stdout)["run_dir"])
    (run_dir / "go").touch()
    assert status.returncode == 0, status.stderr
    header = next(line for line in status.stdout.splitlines() if line.startswith("task"))
    assert "cpu" in header and "memory" in header, status.stdout
    row = next(line for line in status.stdout.splitlines() if line.startswith("worker-0"))
    assert "MiB" in row and "peak" in row, row
    [shown] = json.loads(as_json.stdout)["tasks"]
    assert shown["usage"]["rss"] > 48 << 20
    tfdist("stop", job_id)



def test_an_agent_sends_its_running_tasks_usage_and_the_driver_takes_it(tmp_path: Path) -> None:
    import socket

    from tfdist.node import agent as node_agent

    mine, theirs = socket.socketpair()
    try:
        task = "import time; print('running', flush=True); time.sleep(3)"
        agent = node_agent.Agent(mine, {"command": [sys.executable, "-c", task]}, "t")
        assert agent.to_sample() == {}  # nothing runs yet
        agent.start(1, {}, str(tmp_path))
        assert agent.proc is not None
        watched = agent.to_sample()
        assert watched == {"1": (agent.proc.pid, None)}
        # sampled once the task runs its first line: in the middle of its exec the process
        # has a new, still empty address space (RSS 0), which a loaded machine once caught
        theirs.settimeout(10)
        got = b""
        while b"running" not in got:
            got += theirs.recv(65536)
        agent.sampled(Sampler().sample(watched))
        while b'"ev": "usage"' not in got:
            got += theirs.recv(65536)
        [msg] = [m for m in (json.loads(line) for line in got.decode().splitlines()) if m["ev"] == "usage"]
        assert msg["attempt"] == 1 and msg["rss"] > 1 << 20 and msg["cpu"] is None
        event = usage_event("worker-0", msg["attempt"], msg["time"], msg)
        assert event is not None and event.rss == msg["rss"] and event.limit is None
        agent.proc.done.wait(30)
        assert agent.to_sample() == {}  # ended: no more samples
    finally:
        agent.shutdown()
        mine.close()
        theirs.close()


def test_a_bad_sampling_interval_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--", sys.executable,
                  "-c", "pass", env={usage.INTERVAL_VAR: "soon"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("tfdist: error: TFDIST_USAGE_INTERVAL='soon'") and proc.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_store_that_falls_behind_skips_samples_not_transitions() -> None:
    from tfdist.backends.base import Usage
    from tfdist.jobs.recorder import JobRecorder
    from tfdist.jobs.store import JobRef
    from tfdist.supervisor.observer import JobSnapshot

    class Behind:  # a writer whose queue is three quarters full
        max_pending, backlog = 100, 75

        def __init__(self) -> None:
            self.ops: list[object] = []

        def submit(self, op: object, *, final: bool = False) -> bool:
            self.ops.append(op)
            return True

    writer = Behind()
    recorder = JobRecorder(Store(), JobRef("j"), writer)  # type: ignore[arg-type]
    job = JobSnapshot("j", "/r", 0.0, 0, 0)
    task = TaskStatus("worker-0", "worker", 0, TaskState.RUNNING)
    recorder.on_usage(job, task, Usage("worker-0", 0, 1.0, None, 500))
    recorder.on_usage(job, task, Usage("worker-0", 0, 2.0, 0.5, 100))
    assert writer.ops == []  # skipped while behind
    writer.backlog = 10
    recorder.on_usage(job, task, Usage("worker-0", 0, 3.0, 0.5, 200))
    recorder.on_transition(job, task, 3.0)
    assert len(writer.ops) == 2 and recorder._usage["worker-0"]["peak_rss"] == 500  # the peak survived

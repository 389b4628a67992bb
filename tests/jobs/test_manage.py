"""Managing recorded jobs safely: clean deletes only tfdist's own run directories, run
directories are tfdist's, `stop` is idempotent and keeps the grace, `logs --task` reads only
the job's own logs, and bad --grace / --older-than / --runs-dir are refused up front."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, TFDIST, tfdist
from tests.jobs.store_helpers import wait_until
from tfdist import runs
from tfdist.errors import SpecError
from tfdist.jobs.handle import JobHandle
from tfdist.jobs.store import Store
from tfdist.jobspec import load
from tfdist.states import JobState


def _bad(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def _record(job_id: str, run_dir: Path | str, state: JobState = JobState.SUCCEEDED) -> None:
    store = Store()
    store.create_job(job_id, name=job_id, run_dir=str(run_dir), backend="local", state=state)
    if not state.active:
        store.mark(job_id, state)
    store.close()


def test_clean_keeps_a_users_directory_and_a_symlinks_target(tmp_path: Path) -> None:
    mine = tmp_path / "my-experiments"
    mine.mkdir()
    (mine / "notes.txt").write_text("months of work")
    _record("foreign", mine)  # e.g. recorded by an older tfdist that took any --run-dir
    target = runs.new_run_dir("real", tmp_path / "elsewhere")  # a real run dir, marked
    (target / "model.keras").write_text("weights")
    link = tmp_path / "link"
    link.symlink_to(target)
    _record("linked", link)
    ours = runs.new_run_dir("ours", tmp_path / "runs")
    (ours / "logs").mkdir()
    _record("ours", ours)

    proc = tfdist("clean", "--older-than", "0")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"removed ours (succeeded) and its run directory {ours}" in out
    assert f"removed foreign (succeeded) (record only: {mine} is not a tfdist run directory, kept)" in out
    assert f"removed linked (succeeded) (record only: {link} is not a tfdist run directory, kept)" in out
    assert "removed 3 jobs" in out
    assert (mine / "notes.txt").read_text() == "months of work"
    assert (target / "model.keras").read_text() == "weights" and link.is_symlink()
    assert not ours.exists()
    assert Store().jobs() == []


@pytest.mark.parametrize("age", ["nan", "inf", "-1d", "soon", ""])
def test_clean_refuses_an_unreadable_age(tmp_path: Path, age: str) -> None:
    done = runs.new_run_dir("done", tmp_path / "runs")
    _record("done", done)
    _bad(tfdist("clean", "--older-than", age), "--older-than")
    assert done.is_dir() and len(Store().jobs()) == 1


def test_run_dir_must_be_tfdists_own(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('mine')\n")
    ok = str(BIN / "ok.py")
    _bad(tfdist("run", "--run-dir", ".", "--workers", "1", "--", "python", ok, cwd=tmp_path),
         "--run-dir", "not empty", "not made by tfdist")
    other = tmp_path / "data"
    other.mkdir()
    (other / "x.csv").write_text("1,2\n")
    _bad(tfdist("run", "--run-dir", str(other), "--workers", "1", "--", "python", ok), "not empty")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "new")
    _bad(tfdist("run", "--run-dir", str(link), "--workers", "1", "--", "python", ok), "symbolic link")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "link", "train.py"]
    assert not (other / runs.MARKER).exists() and Store().jobs() == []
    # a new directory is made and marked as tfdist's; the job runs in it
    fresh = tmp_path / "fresh"
    proc = tfdist("run", "-q", "--run-dir", str(fresh), "--workers", "1", "--", "python", ok)
    assert proc.returncode == 0, proc.stderr
    assert runs.is_run_dir(fresh) and (fresh / "summary.json").exists()


def test_run_dirs_and_the_store_are_private_to_their_user(tmp_path: Path) -> None:
    """Logs hold secrets (a token a script prints): on a shared machine no other user may
    read a run directory, nor the store (a root cause keeps a log's last lines), whatever
    the umask; a runs root the user named keeps its own mode."""
    old = os.umask(0o022)
    try:
        proc = tfdist("run", "-q", "--workers", "1", "--", "python", str(BIN / "ok.py"), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        given = runs.use_run_dir(tmp_path / "given")
    finally:
        os.umask(old)
    [made] = (tmp_path / runs.DEFAULT_RUNS).iterdir()
    db = Store().location.path
    assert db is not None
    for path in (made, given, db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, (path, oct(path.stat().st_mode))
    assert (made / "logs" / "worker-0.log").exists()
    assert stat.S_IMODE((tmp_path / runs.DEFAULT_RUNS).stat().st_mode) == 0o755


@pytest.mark.parametrize("command", ["run", "submit"])
def test_runs_dir_that_is_a_file_or_cannot_be_made_is_refused_before_anything(
    tmp_path: Path, command: str
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for runs_dir, needle in ((afile, "is not a directory"), (afile / "sub", "cannot create")):
        proc = tfdist(command, "--runs-dir", str(runs_dir), "--workers", "1", "--", "python",
                      str(BIN / "ok.py"), cwd=tmp_path)
        _bad(proc, "--runs-dir", needle)
    assert afile.read_text() == "not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert Store().jobs() == []


def test_logs_accepts_only_the_jobs_own_task_names_before_any_task_row(tmp_path: Path) -> None:
    """A job just submitted has no task rows yet: its job.yaml says which tasks it has."""
    run_dir = runs.new_run_dir("fresh", tmp_path / "runs")
    job = load.quick(["python", "train.py"], name="fresh", workers=2)
    (run_dir / runs.JOB_FILE).write_text(job.to_yaml())
    (run_dir / "secret.log").write_text("SECRET\n")
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "worker-1.log").write_text("w1 line\n")
    (run_dir / "logs" / "stray.log").write_text("STRAY\n")
    _record("fresh", run_dir, JobState.SUBMITTED)
    assert Store().tasks("fresh") == []
    for name in ("../secret", "../../etc/hostname", "stray", "worker-2", "/etc/hostname", ""):
        _bad(tfdist("logs", "fresh", "--task", name), "has no task", "worker-0, worker-1")
        with pytest.raises(SpecError, match="has no task"):
            JobHandle("fresh").logs(name)
    assert tfdist("logs", "fresh", "--task", "worker-1").stdout == "w1 line\n"
    every = tfdist("logs", "fresh").stdout
    assert every == "[worker-1] w1 line\n"  # never a stray file
    assert "SECRET" not in JobHandle("fresh").logs() + JobHandle("fresh").logs("worker-0")


@pytest.mark.parametrize("grace", ["-1", "nan", "inf", "1e9", "soon"])
def test_stop_refuses_a_bad_grace_before_any_signal(grace: str) -> None:
    _bad(tfdist("stop", "nosuchjob", "--grace", grace), "--grace")


@pytest.mark.integration
def test_two_stops_at_once_keep_the_grace_period(tmp_path: Path) -> None:
    """The task needs a few seconds after SIGTERM to save; a second `tfdist stop` while the
    first is under way must not cut that short (it once counted as a second Ctrl-C: an
    immediate kill)."""
    job_file = tmp_path / "saver.yaml"
    job_file.write_text(f"name: saver\nstop_grace_seconds: 30\nenv: {{SAVE_SECONDS: '4'}}\n"
                        f"command: [python, {BIN / 'save_on_sigterm.py'}]\nroles: {{worker: 1}}\n")
    proc = tfdist("submit", "--runs-dir", str(tmp_path / "runs"), str(job_file))
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.split()[-1]
    run_dir = Path(json.loads(tfdist("status", job, "--json").stdout)["run_dir"])
    log, got, saved = run_dir / "logs" / "worker-0.log", run_dir / "worker-0.sigterm", run_dir / "worker-0.saved"
    wait_until(lambda: log.exists() and "ready" in log.read_text(), what="the task to be ready")
    for grace in ("-1", "nan", "inf"):  # refused, and nothing was signalled
        _bad(tfdist("stop", job, "--grace", grace), "--grace")
    # a stop records its request before it sends SIGTERM (manage.stop), and these have
    # exited: no request recorded is no signal sent (a sleep here proved nothing when slow)
    st = json.loads(tfdist("status", job, "--json").stdout)
    assert st["state"] == "running" and st["stop_requested"] is None, st
    assert not got.exists()

    first = subprocess.Popen([*TFDIST, "stop", job], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    wait_until(got.exists, what="the first stop's SIGTERM")
    second = subprocess.Popen([*TFDIST, "stop", job], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=60) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    assert saved.exists()  # the save finished: the grace was kept
    st = json.loads(tfdist("status", job, "--json").stdout)
    assert st["state"] == "stopped" and st["tasks"][0]["exit_code"] == 0
    assert all("killing it" not in err for _, err in outs)
    assert "is already being stopped" in outs[1][1]  # the second came while the first ran

"""A broken job store says what is wrong and what to do, in one line: damaged (a bad page,
an empty file, invalid JSON in a row), a directory or unreadable file, a full disk, a bad
TFDIST_STORE_TIMEOUT. Never a traceback, never a silently empty history."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN, ROOT, tfdist
from tfdist.jobs.store import Store
from tfdist.states import JobState


def _home() -> Path:
    return Path(os.environ["TFDIST_HOME"])


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str, code: int = 1) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("tfdist: error: "), proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def _store_with_jobs(n: int = 40) -> Path:
    store = Store()
    for i in range(n):
        store.create_job(f"job-{i}", name="j", run_dir=f"/r/{i}", backend="local",
                         state=JobState.SUCCEEDED)
    store.read("checkpoint", "PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file
    store.close()
    return store.path


def test_a_damaged_page_is_one_line_with_the_remedy() -> None:
    path = _store_with_jobs()
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    for offset in range(size, len(data), size):  # every page but the header's
        data[offset:offset + 100] = b"\xff" * 100
    path.write_bytes(bytes(data))
    for args in (["list"], ["status", "job-3"], ["list", "--json"]):
        _one_line_error(tfdist(*args), "is damaged", f"mv {path} {path}.bad")


def test_an_empty_store_file_is_not_an_empty_history() -> None:
    """A zero-length jobs.db (truncated by a crash or a full disk) once read as 'no jobs yet'."""
    _home().mkdir(parents=True, exist_ok=True)
    (_home() / "jobs.db").write_bytes(b"")
    for args in (["list"], ["list", "--json"], ["status", "x"]):
        _one_line_error(tfdist(*args), "is an empty file (0 bytes)", "mv ")
        assert "damaged" not in tfdist(*args).stderr  # it is empty, nothing says it is damaged
    assert (_home() / "jobs.db").stat().st_size == 0  # left as found, for the user to inspect


def test_invalid_json_in_a_row_is_said_once_and_the_rest_is_shown(tmp_path: Path) -> None:
    path = _store_with_jobs(3)
    store = Store(path)
    store.write("damage", lambda db: db.execute(
        "UPDATE jobs SET metrics = '{not json', root_cause = 'also [not' WHERE id = 'job-1'"))
    store.close()
    proc = tfdist("list", "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert sorted(j["id"] for j in json.loads(proc.stdout)) == ["job-0", "job-1", "job-2"]
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and all(ln.startswith("tfdist: warning: ") and "job job-1" in ln for ln in lines)
    assert "not valid JSON" in lines[0]
    proc = tfdist("status", "job-1")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "job-1" in proc.stdout


def test_a_directory_in_place_of_the_store_or_a_file_as_home_is_one_line(tmp_path: Path) -> None:
    (_home() / "jobs.db").mkdir(parents=True)
    _one_line_error(tfdist("list"), "is a directory", "TFDIST_HOME")
    (tmp_path / "afile").write_text("")
    for home in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        _one_line_error(tfdist("list", env={"TFDIST_HOME": str(home)}), "is not a directory",
                        "set TFDIST_HOME")


def _as_a_user_modes_bind(*args: str) -> subprocess.CompletedProcess:
    """``tfdist ARGS`` where file modes bind (as root: without the override capabilities)."""
    from tests.conftest import TFDIST, where_modes_bind

    return subprocess.run(where_modes_bind([*TFDIST, *args]), capture_output=True, text=True, timeout=240)


def test_an_unreadable_store_names_permissions() -> None:
    path = _store_with_jobs(1)
    assert _as_a_user_modes_bind("list").returncode == 0  # the same user reads it when it may
    path.chmod(0)
    try:
        _one_line_error(_as_a_user_modes_bind("list"), "may not read or write it", "ls -l")
    finally:
        path.chmod(0o644)


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf", "1e9"])
def test_a_bad_store_timeout_is_bad_input_not_a_crash(tmp_path: Path, value: str) -> None:
    env = {"TFDIST_STORE_TIMEOUT": value}
    _one_line_error(tfdist("list", env=env), "TFDIST_STORE_TIMEOUT", repr(value), code=2)
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--", "python",
                  str(BIN / "ok.py"), env=env)
    _one_line_error(proc, "TFDIST_STORE_TIMEOUT", code=2)
    assert not (tmp_path / "runs").exists()  # nothing started or written
    proc = tfdist("submit", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--", "python",
                  str(BIN / "ok.py"), env=env)
    _one_line_error(proc, "TFDIST_STORE_TIMEOUT", code=2)
    assert not (tmp_path / "runs").exists()
    assert tfdist("--help", env=env).returncode == 0  # commands without the store are unaffected


def test_a_full_disk_is_named_as_such_with_its_remedy(tmp_path: Path) -> None:
    """A write that fails with ENOSPC says 'disk is full' and 'free space', never 'move the
    corrupt store away' (which would throw the history away)."""
    from tfdist.errors import StoreError
    from tfdist.jobs import faults

    err = faults.classify(OSError(28, "No space left on device"), tmp_path / "jobs.db", "update", 15)
    assert isinstance(err, StoreError) and err.kind == "full" and err.transient
    assert "disk is full" in str(err) and "free space" in str(err) and "mv " not in str(err)
    import sqlite3

    err = faults.classify(sqlite3.OperationalError("database or disk is full"), tmp_path / "j.db", "x", 1)
    assert err.kind == "full" and "mv " not in str(err)
    err = faults.classify(sqlite3.OperationalError("database is locked"), tmp_path / "j.db", "x", 1)
    assert err.kind == "locked" and "try again" in str(err)


_FULL_DISK = r"""
set -e
mount -t tmpfs -o size=600k tmpfs "$TFDIST_HOME"
exec "$PYTHON" "$SCRIPT"
"""

_SCENARIO = r"""
import json, os, subprocess, sys, time
from pathlib import Path
home, work = Path(os.environ["TFDIST_HOME"]), Path(os.environ["WORK"])
cli = [sys.executable, "-m", "tfdist.cli"]
def run(*args):
    return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)
job = run("submit", "--runs-dir", str(work / "runs"), "--workers", "2", "--name", "full",
          "--", sys.executable, "-c", os.environ["UNTIL_GO"]).stdout.split()[-1]
deadline = time.monotonic() + 60
while True:
    st = json.loads(run("status", job, "--json").stdout)
    if [t["state"] for t in st["tasks"]] == ["running", "running"]:
        break
    assert time.monotonic() < deadline, st
    time.sleep(0.2)
import sqlite3
db = sqlite3.connect(str(home / "jobs.db"), isolation_level=None)
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every new write must grow the WAL
db.close()
with open(home / "filler", "wb", buffering=0) as f:  # fill the disk
    try:
        while True:
            f.write(b"x" * 4096)
    except OSError:
        pass
Path(st["run_dir"], "go").touch()
while not Path(st["run_dir"], "summary.json").exists() or subprocess.run(
        ["kill", "-0", str(st["supervisor_pid"])], capture_output=True).returncode == 0:
    assert time.monotonic() < deadline + 60
    time.sleep(0.2)
out = {"status": json.loads(run("status", job, "--json").stdout),
       "list": json.loads(run("list", "--json").stdout),
       "log": Path(st["run_dir"], "supervisor.log").read_text()}
print(json.dumps(out))
"""


@pytest.mark.integration
def test_a_job_on_a_full_disk_store_reads_succeeded_and_says_disk_full(tmp_path: Path) -> None:
    """The store's disk fills while a job runs: the job still ends succeeded (from its
    summary.json), and its supervisor said 'disk is full', not 'corrupt'."""
    from tests.jobs.store_helpers import UNTIL_GO

    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs without root")
    probe = subprocess.run([unshare, "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces unavailable here: {probe.stderr.decode().strip()}")
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "scenario.py"
    script.write_text(_SCENARIO)
    env = dict(os.environ, TFDIST_HOME=str(home), WORK=str(tmp_path), UNTIL_GO=UNTIL_GO,
               PYTHON=sys.executable, SCRIPT=str(script), TFDIST_STORE_TIMEOUT="0.5",
               PYTHONPATH=f"{ROOT / 'src'}:{ROOT}")
    proc = subprocess.run([unshare, "-rm", "sh", "-c", _FULL_DISK], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["status"]["state"] == "succeeded" and out["status"]["exit_code"] == 0
    assert [j["state"] for j in out["list"]] == ["succeeded"]
    assert "disk is full" in out["log"] and "free space" in out["log"]
    assert "mv " not in out["log"] and "Traceback" not in out["log"]


@pytest.mark.parametrize("kind", ["fifo", "devnull"])
def test_a_store_that_is_not_a_file_says_what_it_is(tmp_path: Path, kind: str) -> None:
    """A named pipe or a device in place of the store was "a disk I/O error; check the disk":
    it is neither, and nothing is wrong with the disk."""
    if kind == "fifo":
        where = tmp_path / "jobs.db"
        os.mkfifo(where)
        needle = "is a named pipe"
    else:
        where, needle = Path(os.devnull), "is a character device"
    for args in (["list"], ["status", "x"]):
        proc = tfdist(*args, env={"TFDIST_STORE": str(where)}, timeout=60)
        _one_line_error(proc, needle, "not a file", code=1)
        assert "disk I/O" not in proc.stderr and "damaged" not in proc.stderr


def test_a_file_that_is_not_a_database_is_not_called_a_damaged_store(tmp_path: Path) -> None:
    """TFDIST_STORE naming a text file (a typo, the wrong variable) was 'job store ... is
    damaged; move it away': it never was a store. A file that starts as SQLite's do and
    is broken further in is still called damaged (test_a_damaged_page_is_one_line...)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a job history\n" * 100)
    for args in (["list"], ["status", "x"]):
        proc = tfdist(*args, env={"TFDIST_STORE": str(notes)})
        _one_line_error(proc, "is not an SQLite database", "TFDIST_STORE")
        assert "damaged" not in proc.stderr
    assert notes.read_text().startswith("my notes")  # left as it was


def test_an_sqlite_error_that_is_not_damage_is_not_called_damage(tmp_path: Path) -> None:
    """Only a damaged file (SQLite's CORRUPT and NOTADB) is called damaged, with its remedy of
    moving the store away: a query SQLite refuses is not a reason to throw a history away."""
    import sqlite3

    from tfdist.jobs import faults

    path = tmp_path / "jobs.db"
    for text in ("LIKE or GLOB pattern too complex", "too many SQL variables", "string or blob too big"):
        err = faults.classify(sqlite3.OperationalError(text), path, "read", 15)
        assert err.kind != "corrupt" and "damaged" not in str(err) and "mv " not in str(err), text
        assert text in str(err)
    for text in ("database disk image is malformed", "file is not a database"):
        err = faults.classify(sqlite3.DatabaseError(text), path, "read", 15)
        assert err.kind == "corrupt" and "damaged" in str(err), text


def test_a_job_reference_that_cannot_be_an_id_is_bad_input_not_damage(store_kind: str) -> None:
    """A reference of 100,000 characters was a 'damaged' store (SQLite's LIKE pattern limit),
    a NUL one a prefix match, a non-UTF-8 one a traceback: each is refused as what it is."""
    from tfdist.errors import SpecError

    store = Store()
    store.create_job("job-1", name="j", run_dir="/r/1", backend="local", state=JobState.SUCCEEDED)
    for ref in ("j" * 100_000, "job-1\x00", "job\udcff", "", "é" * 128):
        with pytest.raises(SpecError) as err:
            store.job(ref)
        assert "\n" not in str(err.value) and "damaged" not in str(err.value), ascii(ref[:20])
    assert store.job("job").id == "job-1" and store.job("job-1", exact=True).id == "job-1"

"""tfdist tensorboard JOB and run/submit --tensorboard: the URL is printed and recorded, it
answers, and TensorBoard stops with the job. Uses the real TensorBoard when it is installed
(or TFDIST_TENSORBOARD names one), else a stand-in that behaves the same on the outside."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.conftest import BIN, TFDIST, tfdist

pytestmark = pytest.mark.integration
FAKE = f"{sys.executable} {Path(__file__).with_name('fake_tensorboard.py')}"
REAL = bool(os.environ.get("TFDIST_TENSORBOARD") or importlib.util.find_spec("tensorboard")
            or shutil.which("tensorboard"))


@pytest.fixture
def board_env(monkeypatch: pytest.MonkeyPatch) -> None:
    if not REAL:
        monkeypatch.setenv("TFDIST_TENSORBOARD", FAKE)


def answers(url: str, within: float = 0) -> bool:
    """Whether ``url`` serves a page, asking again for ``within`` seconds (a loaded machine
    may take a while to serve TensorBoard's first page)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def test_missing_tensorboard_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs where TensorBoard is installed too (it skipped there, so never ran: TensorFlow
    brings it): tfdist's process is started with a ``sitecustomize`` that marks the module
    absent (``sys.modules['tensorboard'] = None``, which is what ``find_spec`` reads), and a
    PATH without its script."""
    monkeypatch.delenv("TFDIST_TENSORBOARD", raising=False)
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['tensorboard'] = None\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(
        x for x in (str(hide), os.environ.get("PYTHONPATH", "")) if x)}
    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('tensorboard'))"],
                           capture_output=True, text=True, env=dict(os.environ, **env), timeout=60)
    assert probe.stdout.strip() == "None", probe  # hidden as tfdist will look for it
    runs = tmp_path / "runs"
    proc = tfdist("run", "--tensorboard", "--runs-dir", str(runs), "--workers", "1", "--",
                  "python", str(BIN / "ok.py"), env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "TensorBoard is not installed: pip install tensorboard" in proc.stderr
    assert not runs.exists() or not [p for p in runs.iterdir() if p.name != "pending"]
    sub = tfdist("submit", "--tensorboard", "--runs-dir", str(runs), "--workers", "1", "--",
                 "python", str(BIN / "ok.py"), env=env)  # said before a supervisor is detached
    assert sub.returncode == 1 and sub.stdout == "", (sub.stdout, sub.stderr)
    assert "TensorBoard is not installed: pip install tensorboard" in sub.stderr and sub.stderr.count("\n") == 1
    assert not runs.exists() or not [p for p in runs.iterdir() if p.name != "pending"]
    assert "no jobs yet" in tfdist("list", env=env).stdout  # nothing recorded either


def test_tensorboard_command_serves_until_the_job_ends(tmp_path: Path, board_env: None) -> None:
    sub = tfdist("submit", "--runs-dir", str(tmp_path), "--workers", "1", "--name", "tb", "--",
                 "python", str(BIN / "hang.py"))
    job = sub.stdout.strip().splitlines()[-1]
    board = subprocess.Popen([*TFDIST, "tensorboard", job], stdout=subprocess.PIPE, text=True)
    try:
        assert board.stdout is not None
        first = board.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)", first)
        assert match, first
        assert answers(match.group(1), within=30)
        assert "stops when the job ends" in board.stdout.readline()
        assert tfdist("stop", job).returncode == 0
        board.wait(timeout=30)  # it ends by itself with the job
        assert board.returncode == 0
        assert "ended; TensorBoard stopped" in board.stdout.read()
        assert not answers(match.group(1))
    finally:
        if board.poll() is None:
            board.kill()


def test_submit_with_tensorboard_records_the_url_and_stops_it(tmp_path: Path, board_env: None) -> None:
    sub = tfdist("submit", "--tensorboard", "--runs-dir", str(tmp_path), "--workers", "1", "--name", "tbs",
                 "--", "python", str(BIN / "hang.py"))
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().splitlines()[-1]
    deadline = time.monotonic() + 90
    while True:
        st = json.loads(tfdist("status", job, "--json").stdout)
        if st["tensorboard_url"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    url = st["tensorboard_url"]
    assert url and answers(url, within=30)
    handed = Path(st["run_dir"]) / "tensorboard.url"  # how a backend learns it (YARN's tracking URL)
    assert handed.read_text().strip() == url
    assert f"tensorboard: {url}" in tfdist("status", job).stdout
    board_pids = [c.pid for c in psutil.Process(st["supervisor_pid"]).children()
                  if "tensorboard" in " ".join(c.cmdline())]
    assert len(board_pids) == 1
    os.kill(st["supervisor_pid"], signal.SIGINT)  # Ctrl-C on the job stops TensorBoard too
    # the supervisor records the URL's end after TensorBoard is gone, then exits
    deadline = time.monotonic() + 30
    while _running(board_pids[0]) or _running(st["supervisor_pid"]):
        assert time.monotonic() < deadline, "TensorBoard or the supervisor still runs"
        time.sleep(0.2)
    assert not answers(url)
    assert json.loads(tfdist("status", job, "--json").stdout)["tensorboard_url"] is None
    assert not handed.exists()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

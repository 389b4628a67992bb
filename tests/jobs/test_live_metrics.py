"""The live view (a snapshot of the pure table function), plain progress lines when piped,
and metrics as CSV/JSON/PNG from a real job."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import tfdist
from tfdist.cli.live import build_view, job_fraction, stragglers
from tfdist.states import TaskState
from tfdist.supervisor.status import TaskStatus

TASK = Path(__file__).with_name("progress_task.py")

SNAPSHOT = """\
job digits  4/5 tasks running  42s  restarts 1 of 3 used, 2 left
task         state    epoch  step  steps/s  examples/s    loss  restarts
chief-0      running    2/4    40     50.0        3200  0.5123         0
worker-0     running    2/4    40     48.0        3100  0.5311         0
worker-1     running    1/4    20     15.0        1000  0.9000         1  straggler
ps-0         running      -     -        -           -       -         0
evaluator-0  pending      -     -        -           -       -         0
progress ━━━━━━━━━━━━━━━━╸                        42%
"""


def _status(name: str, state: TaskState, **progress: object) -> TaskStatus:
    role, index = name.rsplit("-", 1)
    return TaskStatus(name, role, int(index), state=state, progress=dict(progress))


def _statuses() -> dict[str, TaskStatus]:
    s = {
        "chief-0": _status("chief-0", TaskState.RUNNING, epoch=2, epochs=4, step=40, loss=0.5123,
                           examples_per_sec=3200.0, steps_per_sec=50.0),
        "worker-0": _status("worker-0", TaskState.RUNNING, epoch=2, epochs=4, step=40, loss=0.5311,
                            examples_per_sec=3100.0, steps_per_sec=48.0),
        "worker-1": _status("worker-1", TaskState.RUNNING, epoch=1, epochs=4, step=20, loss=0.9,
                            examples_per_sec=1000.0, steps_per_sec=15.0),
        "ps-0": _status("ps-0", TaskState.RUNNING),
        "evaluator-0": _status("evaluator-0", TaskState.PENDING),
    }
    s["worker-1"] = dataclasses.replace(s["worker-1"], restarts=1)
    return s


def test_live_view_snapshot_at_width_100() -> None:
    console = Console(record=True, width=100, color_system=None, force_terminal=False)
    console.print(build_view(_statuses(), job_name="digits", elapsed=42.4, restarts=(1, 3)))
    # rich pads table rows to their width; the snapshot is kept without trailing blanks
    assert [line.rstrip() for line in console.export_text().splitlines()] == SNAPSHOT.splitlines()


def test_straggler_rule_and_progress_fraction() -> None:
    assert stragglers({"w0": 10.0, "w1": 10.0, "w2": 6.9}) == {"w2"}
    assert stragglers({"w0": 10.0, "w1": 10.0, "w2": 7.1}) == set()
    assert stragglers({"w0": 10.0}) == set()  # nothing to compare with
    statuses = _statuses()
    assert job_fraction(statuses) == pytest.approx((0.5 + 0.5 + 0.25) / 3)
    # rates derived from successive reports count when a task reports none
    statuses = {n: dataclasses.replace(s, progress={k: v for k, v in s.progress.items() if k != "steps_per_sec"})
                for n, s in statuses.items()}
    console = Console(record=True, width=100, color_system=None)
    console.print(build_view(statuses, job_name="d", elapsed=1,
                             rates={"chief-0": 5.0, "worker-0": 5.0, "worker-1": 5.0}))
    assert "straggler" not in console.export_text()
    console.print(build_view(statuses, job_name="d", elapsed=1,
                             rates={"chief-0": 5.0, "worker-0": 5.0, "worker-1": 1.0}))
    assert console.export_text().count("straggler") == 1


@pytest.mark.integration
def test_run_live_on_a_terminal_and_plain_lines_when_piped(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    piped = tfdist("run", "--runs-dir", runs, "--workers", "3", "--name", "prog", "--",
                   "python", str(TASK), "3", "0.3")
    assert piped.returncode == 0, piped.stderr
    assert "\x1b[" not in piped.stdout  # no cursor moves or colours in a pipe
    assert "tfdist: worker-0 epoch 2/3 step 20 loss 1.0000 accuracy 0.7500 2133 ex/s" in piped.stdout
    # one line per report of the job's reference task (worker-0), the straggler named in it
    assert "tfdist: worker-0 epoch 3/3 step 30 loss 0.6667 accuracy 0.8333 2133 ex/s (stragglers: worker-1)\n" \
        in piped.stdout, piped.stdout
    assert "tfdist: worker-1 " not in piped.stdout and "tfdist: worker-2 " not in piped.stdout

    # On a terminal (script(1) gives the run a pty): the live table with a straggler mark.
    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed: no pty to test the terminal view with")
    out = tmp_path / "tty.out"
    cmd = f"{tfdist_cmd()} run --runs-dir {runs} --workers 3 -- python {TASK} 3 0.4"
    proc = subprocess.run(["script", "-qec", cmd, str(out)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="100", LINES="40"))
    assert proc.returncode == 0, proc.stdout[-2000:]
    text = out.read_text(errors="replace")
    assert "examples/s" in text and "straggler" in text and "progress" in text
    assert "[worker-1] worker-1 epoch 1 done" in text.replace("\x1b[0m", "").replace("\x1b[33m", "")


def tfdist_cmd() -> str:
    import sys

    return f"{sys.executable} -m tfdist.cli"


@pytest.mark.integration
def test_metrics_csv_json_and_png(tmp_path: Path) -> None:
    proc = tfdist("run", "-q", "--runs-dir", str(tmp_path / "runs"), "--workers", "2", "--name", "met",
                  "--", "python", str(TASK), "3", "0.2")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(tfdist("list", "--json").stdout)[0]["id"]
    rows = list(csv.DictReader(io.StringIO(tfdist("metrics", job).stdout)))
    assert len(rows) == 8  # 3 epochs + the final report, for each of 2 workers
    assert {r["task"] for r in rows} == {"worker-0", "worker-1"}
    w0 = [r for r in rows if r["task"] == "worker-0"]
    assert [r["epoch"] for r in w0] == ["1", "2", "3", "3"] and w0[0]["loss"] == "2.0"
    assert w0[1]["accuracy"] == "0.75" and float(w0[1]["elapsed"]) > 0
    data = json.loads(tfdist("metrics", job, "--format", "json").stdout)
    assert len(data) == 8 and data[-1]["final"] is True
    png = tmp_path / "plot.png"
    plotted = tfdist("plot", job, "-o", str(png))
    assert plotted.returncode == 0, plotted.stderr
    head = png.read_bytes()
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) > 10_000
    empty = tfdist("run", "-q", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--name", "none",
                   "--", "python", "-c", "print(1)")
    assert empty.returncode == 0
    none = tfdist("plot", "none", "-o", str(tmp_path / "x.png"))
    assert none.returncode == 2 and "no progress reports" in none.stderr


def test_a_task_as_fast_as_its_peers_is_no_straggler() -> None:
    """Tasks at 1,400 and 1,403 ex/s whose reports (no steps/s in them) reach the supervisor
    unevenly (a pipe's buffering): a rate derived from the last two arrivals had one at 10
    steps/s beside one at 200. Judged on the rate they report, of the same kind for every
    task, over their last few reports, neither is a straggler; one at half its peers' is."""
    import io

    from tfdist.cli.live import PlainProgress

    out = io.StringIO()
    view = PlainProgress(out)
    rates = {"worker-0": 1400.0, "worker-1": 1403.0, "worker-2": 1400.0}
    tasks = {n: _status(n, TaskState.RUNNING) for n in rates}
    view.on_start(None, tuple(tasks.values()))  # type: ignore[arg-type]
    arrivals = {"worker-0": [1.0, 2.0, 3.0, 4.0], "worker-1": [1.0, 2.9, 2.95, 4.0], "worker-2": [1.0, 2.0, 3.0, 4.0]}

    def feed(name: str, i: int, ex: float) -> None:
        report = {"step": 10 * (i + 1), "loss": 0.5, "examples_per_sec": ex}
        tasks[name] = dataclasses.replace(tasks[name], progress={**tasks[name].progress, **report})
        view.on_progress(None, tasks[name], arrivals[name][i], report)  # type: ignore[arg-type]

    for i in range(3):
        for name, ex in rates.items():
            feed(name, i, ex)
    assert "straggler" not in out.getvalue(), out.getvalue()
    for name, ex in (("worker-0", 1400.0), ("worker-1", 1403.0), ("worker-2", 600.0)):
        feed(name, 3, ex)
    assert "straggler" not in out.getvalue()  # one slow report is not a slow task
    feed("worker-2", 3, 600.0)
    feed("worker-0", 3, 1400.0)  # the piped lines are the reference task's, naming the stragglers
    assert out.getvalue().splitlines()[-1] == "tfdist: worker-0 step 40 loss 0.5000 1400 ex/s (stragglers: worker-2)"
    assert stragglers({"a": 1403.0, "b": 1400.0}) == set() and stragglers({"a": 1400.0, "b": 900.0}) == {"b"}

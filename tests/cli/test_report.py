"""The end-of-job summary: the same content on a terminal (rich) and piped (plain text);
it and ``tfdist status`` print a task's own text without its terminal escapes."""

from __future__ import annotations

import io
import re

from tests.conftest import tfdist
from tfdist.cli import report
from tfdist.jobs.store import (
    JobRef,
    Store,
    op_create_job,
    op_job_finished,
    op_task_progress,
    op_task_transition,
)
from tfdist.states import JobState, TaskState
from tfdist.supervisor.result import JobResult, RootCause
from tfdist.supervisor.status import TaskStatus


def _result(n: int, failed: int = 0) -> JobResult:
    tasks = tuple(TaskStatus(f"worker-{i}", "worker", i, TaskState.FAILED if i < failed else TaskState.SUCCEEDED,
                             exit_code=3 if i < failed else 0, address=f"127.0.0.1:{2000 + i}")
                  for i in range(n))
    cause = RootCause("worker-0", 0, 3, "exit code 3", 0.0, "policy 'never'", ["[bold]not markup"]) if failed else None
    return JobResult("j", JobState.FAILED if failed else JobState.SUCCEEDED, "/runs/j", 0.0, 1.0,
                     0, 0, tasks, cause)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_piped_summary_is_plain_aligned_text_without_rich() -> None:
    out = io.StringIO()
    report.print_summary(_result(3, failed=1), stream=out)
    lines = out.getvalue().splitlines()
    assert lines[1] == "job j  failed  in 1.0s  restarts 0 of 0 used, 0 left"
    assert lines[2].split() == ["task", "state", "exit", "restarts", "address"]
    assert lines[3].split() == ["worker-0", "failed", "3", "0", "127.0.0.1:2000"]
    assert len({line.index("127.0.0.1") for line in lines[3:6]}) == 1  # columns aligned
    assert "  [bold]not markup" in lines and lines[-1] == "logs: /runs/j/logs"


def test_terminal_and_piped_say_the_same() -> None:
    piped, tty = io.StringIO(), _Terminal()
    report.print_summary(_result(3, failed=1), stream=piped)
    report.print_summary(_result(3, failed=1), stream=tty)
    assert "\x1b[" in tty.getvalue()  # styled
    assert "root cause:" in tty.getvalue() and "[bold]not markup" in tty.getvalue()
    words = [line.split() for line in piped.getvalue().splitlines()]
    plain_tty = re.sub(r"\x1b\[[0-9;]*m", "", tty.getvalue())
    assert words == [line.split() for line in plain_tty.splitlines()]


def test_a_thousand_tasks_are_counted_by_role() -> None:
    out = io.StringIO()
    report.print_summary(_result(1000, failed=2), stream=out)
    text = out.getvalue()
    assert len(text.splitlines()) < 20
    assert "worker  1000   998        2" in text
    assert "tasks that failed or restarted (2 shown):" in text


def test_the_summary_gives_goodput_in_one_line_and_the_advice_in_another() -> None:
    result = _result(1)
    result.goodput = {"goodput": 0.5, "wall_seconds": 4.0,
                      "seconds": {"productive": 2.0, "startup": 1.5, "lost": 0.5},
                      "advice": "save more often"}
    out = io.StringIO()
    report.print_summary(result, stream=out)
    lines = out.getvalue().splitlines()
    assert "goodput 50.0% (2.0s of 4.0s in steps kept); biggest loss: startup 1.5s (38%)" in lines
    assert "advice: save more often" in lines
    assert "goodput" not in "".join(report.plain(b) for b in report.summary(_result(1)))


#: What a task can print, and so have shown as its root cause: OSC 52 (write the clipboard),
#: clear the screen, set the window title, a backspace over what came before.
HOSTILE = "boom \x1b]52;c;cHduZWQ=\x1b\\ \x1b[2J\x1b]0;TITLE\x07 ok\x08\x08 end"


def _no_terminal_control(text: str) -> None:
    styles = re.sub(r"\x1b\[[0-9;]*m", "", text)  # rich's own colours are fine
    assert "\x1b" not in styles and "\x07" not in styles and "\x08" not in styles, repr(text)


def test_a_tasks_text_reaches_the_terminal_without_its_escapes() -> None:
    result = _result(1, failed=1)
    cause = RootCause("worker-0", 0, 3, "exit code 3", 0.0, HOSTILE, [HOSTILE, "plain"])
    for out in (io.StringIO(), _Terminal()):
        report.print_summary(JobResult(**{**result.__dict__, "root_cause": cause}), stream=out)
        _no_terminal_control(out.getvalue())
        assert "boom" in out.getvalue() and "end" in out.getvalue()


def test_status_shows_a_tasks_text_without_its_escapes() -> None:
    ref = JobRef()
    Store().write_batch([
        op_create_job("hostile", name="hostile", run_dir="/nonexistent", backend="local",
                      state=JobState.RUNNING, ref=ref),
        op_task_transition(ref, TaskStatus("worker-0", "worker", 0, TaskState.FAILED, exit_code=3,
                                           reason=HOSTILE), 1.0),
        op_task_transition(ref, TaskStatus("worker-0", "worker", 0, TaskState.FAILED, attempt=1,
                                           exit_code=3), 2.0),
        op_task_progress(ref, "worker-0", 1, 2.0, {"epoch": HOSTILE, "step": HOSTILE}),
        op_job_finished(ref, state=JobState.FAILED, exit_code=1, restarts_used=1,
                        root_cause={"task": "worker-0", "description": HOSTILE, "message": HOSTILE},
                        metrics={HOSTILE: HOSTILE}, ended_at=3.0),
    ])
    proc = tfdist("status", "hostile")
    assert proc.returncode == 0, proc.stderr
    _no_terminal_control(proc.stdout)
    assert proc.stdout.count("boom") >= 4, proc.stdout  # the cause, the reason, progress, metrics


def test_the_summarys_root_cause_leads_with_the_tasks_exception() -> None:
    """Not "worker-1 (attempt 0) exit code 1: ... does not retry it" with the real cause
    further down, under TensorFlow's start-up messages."""
    from tests.supervisor.test_output import FAILED

    cause = RootCause("worker-1", 0, 1, "exit code 1", 0.0,
                      "worker-1 failed (exit code 1); restart policy 'never' does not retry it", FAILED)
    out = io.StringIO()
    report.print_summary(JobResult(**{**_result(2, failed=1).__dict__, "root_cause": cause}), stream=out)
    lines = out.getvalue().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("root cause:"))
    assert lines[at] == "root cause: worker-1: ValueError: bad label 11 (labels are 0..9) (exit code 1)"
    assert "restart policy 'never' does not retry it" in lines[at + 1]
    assert lines[at + 3] == "  epoch 1 of 3" and "oneDNN" not in out.getvalue()


def test_status_leads_the_root_cause_with_the_tasks_exception() -> None:
    """``tfdist status`` as the summary does, for a record kept before ``error`` was too."""
    from dataclasses import asdict

    from tests.supervisor.test_output import FAILED

    cause = asdict(RootCause("worker-1", 0, 1, "exit code 1", 0.0,
                             "worker-1 failed (exit code 1); restart policy 'never' does not retry it", FAILED))
    for name, record in (("now", cause), ("before", {k: v for k, v in cause.items() if k != "error"})):
        ref = JobRef()
        Store().write_batch([
            op_create_job(name, name=name, run_dir=f"/nonexistent-{name}", backend="local", state=JobState.RUNNING,
                          ref=ref),
            op_job_finished(ref, state=JobState.FAILED, exit_code=1, restarts_used=0, root_cause=record,
                            metrics=None, ended_at=3.0)])
        proc = tfdist("status", name)
        out = proc.stdout.splitlines()
        assert proc.returncode == 0, proc.stderr
        at = next(i for i, line in enumerate(out) if line.startswith("root cause:"))
        assert out[at] == "root cause: worker-1: ValueError: bad label 11 (labels are 0..9) (exit code 1)", out
        assert out[at + 1] == "  exit code 1, attempt 0: restart policy 'never' does not retry it"

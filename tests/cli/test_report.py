"""The end-of-job summary: the same content on a terminal (rich) and piped (plain text)."""

from __future__ import annotations

import io
import re

from tfdist.cli import report
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

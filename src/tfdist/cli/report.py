"""The end-of-job summary: job, result, duration, each task, the chief's final metrics,
and for a failure the root cause with the last lines of the failed task's output."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from tfdist.cli.format import exit_text
from tfdist.states import budget_text
from tfdist.supervisor.loop import JobResult

#: Above this many tasks the summary shows counts per role, and only the tasks that failed
#: or restarted, instead of one line per task.
MAX_TASK_ROWS = 20


def by_role(tasks: list[dict[str, Any]]) -> Table:
    """One row per role: how many tasks, how many in each end state, restarts."""
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("role", "tasks", "succeeded", "failed", "stopped", "other", "restarts"):
        table.add_column(col)
    roles: dict[str, list[dict[str, Any]]] = {}
    for t in tasks:
        roles.setdefault(t["name"].rpartition("-")[0], []).append(t)
    for role, group in roles.items():
        count = Counter(t["state"] for t in group)
        other = len(group) - count["succeeded"] - count["failed"] - count["stopped"]
        table.add_row(role, str(len(group)), str(count["succeeded"]), str(count["failed"]),
                      str(count["stopped"]), str(other), str(sum(t["restarts"] for t in group)))
    return table


_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow"}


def print_summary(
    result: JobResult, *, as_json: bool = False, stream: IO[str] | None = None
) -> None:
    out = stream or sys.stdout
    if as_json:
        out.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    console = Console(file=out, highlight=False, soft_wrap=True)
    style = _STYLE.get(result.state, "")
    console.print()
    console.print(
        f"[bold]job[/] {result.name}  [bold {style}]{result.state}[/]  "
        f"in {result.duration:.1f}s  restarts {budget_text(result.restarts_used, result.max_restarts)}"
    )
    if len(result.tasks) > MAX_TASK_ROWS:
        console.print(by_role(result.tasks))
        shown = [t for t in result.tasks if t["state"] == "failed" or t["restarts"]][:MAX_TASK_ROWS]
        if shown:
            console.print(f"tasks that failed or restarted ({len(shown)} shown):")
    else:
        shown = result.tasks
    if shown:
        table = Table(box=None, pad_edge=False, show_edge=False)
        for col in ("task", "state", "exit", "restarts", "address"):
            table.add_column(col)
        for t in shown:
            table.add_row(t["name"], t["state"], exit_text(t["exit_code"]), str(t["restarts"]),
                          t["address"] or "-")
        console.print(table)
    if result.metrics:
        values = ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
            for k, v in result.metrics.items()
        )
        console.print(f"final metrics (chief): {values}")
    cause = result.root_cause
    if cause is not None:
        when = time.strftime("%H:%M:%S", time.localtime(cause.time))
        console.print(
            f"[bold red]root cause:[/] {cause.task} (attempt {cause.attempt}) {cause.description} "
            f"at {when}: {cause.message}",
            markup=True,
        )
        if cause.tail:
            console.print(f"last {len(cause.tail)} lines of {cause.task}:")
            for line in cause.tail:
                console.print(f"  {line}", markup=False)
    if result.lines_lost:
        lost = ", ".join(f"{name} {n}" for name, n in result.lines_lost.items())
        console.print(f"[bold yellow]output lines not written[/] (disk full?): {lost}")
    console.print(f"logs: {result.run_dir}/logs", markup=False)

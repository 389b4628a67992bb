"""The end-of-job summary: job, result, duration, each task, the chief's final metrics, the
goodput and its biggest loss (with advice on the checkpoint interval when it is plain), and
for a failure the root cause with the last lines of the failed task's output.

The summary is built once as lines and tables (:func:`summary`), then written with rich on
a terminal (styles, a table that fits the width) or as plain aligned text when piped.
Piped output never shows styles anyway, and importing rich (~20 ms here) was the largest
cost left of a quick ``tfdist run -q`` in a script.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from tfdist.cli.format import data_lines
from tfdist.safe_text import printable
from tfdist.states import TaskState, budget_text, exit_text
from tfdist.supervisor import goodput
from tfdist.supervisor.output import without_startup
from tfdist.supervisor.result import JobResult
from tfdist.supervisor.status import TaskStatus

#: Above this many tasks the summary shows counts per role, and only the tasks that failed
#: or restarted, instead of one line per task.
MAX_TASK_ROWS = 20

#: A piece of a line: (text, rich style or "").
Piece = tuple[str, str]


@dataclass(frozen=True)
class Grid:
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]


Block = list[Piece] | Grid


def by_role(tasks: Sequence[TaskStatus]) -> Grid:
    """One row per role: how many tasks, how many in each end state, restarts."""
    roles: dict[str, list[TaskStatus]] = {}
    for t in tasks:
        roles.setdefault(t.role, []).append(t)
    rows: list[tuple[str, ...]] = []
    for role, group in roles.items():
        count = Counter(t.state for t in group)
        ended = count[TaskState.SUCCEEDED], count[TaskState.FAILED], count[TaskState.STOPPED]
        rows.append((role, str(len(group)), *(str(n) for n in ended), str(len(group) - sum(ended)),
                     str(sum(t.restarts for t in group))))
    return Grid(("role", "tasks", "succeeded", "failed", "stopped", "other", "restarts"), rows)


_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow", "stopped": "yellow"}


def summary(result: JobResult, data: dict[str, Any] | None = None) -> list[Block]:
    """What the summary says, in order (pure: the renderers only lay it out). ``data``: the
    run's data plan (``data.json``), shown with each task's staging."""
    blocks: list[Block] = [[]]
    used = budget_text(result.restarts_used, result.max_restarts)
    blocks.append([("job", "bold"), (f" {result.name}  ", ""),
                   (result.state, f"bold {_STYLE.get(result.state, '')}".strip()),
                   (f"  in {result.duration:.1f}s  restarts {used}", "")])
    if len(result.tasks) > MAX_TASK_ROWS:
        blocks.append(by_role(result.tasks))
        shown: Sequence[TaskStatus] = [t for t in result.tasks
                                       if t.state is TaskState.FAILED or t.restarts][:MAX_TASK_ROWS]
        if shown:
            blocks.append([(f"tasks that failed or restarted ({len(shown)} shown):", "")])
    else:
        shown = result.tasks
    if shown:
        blocks.append(Grid(("task", "state", "exit", "restarts", "address"), [
            (t.name, t.state.value, exit_text(t.exit_code), str(t.restarts), t.address or "-")
            for t in shown]))
    if result.metrics:
        values = ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.metrics.items()
        )
        blocks.append([(printable(f"final metrics (chief): {values}"), "")])
    staging = {t.name: t.progress["staging"] for t in result.tasks if "staging" in t.progress}
    if data:
        from tfdist.data.plan import summary as bounded

        blocks.extend([(printable(line), "")] for line in data_lines(bounded(data), staging, MAX_TASK_ROWS,
                                                                          result.goodput))
    if result.goodput:
        blocks.append([(goodput.summary_line(result.goodput), "")])
        if result.goodput.get("advice"):
            blocks.append([("advice: ", "bold"), (str(result.goodput["advice"]), "")])
    cause = result.root_cause
    if cause is not None:
        when = time.strftime("%H:%M:%S", time.localtime(cause.time))
        seen = f" (attempt {cause.attempt}) at {when}" if not cause.error else ""
        blocks.append([("root cause:", "bold red"), (printable(f" {cause.headline()}{seen}"), "")])
        if cause.error:  # what tfdist saw, under the task's own words
            blocks.append([(printable(f"  {cause.task} (attempt {cause.attempt}) {cause.description} at "
                                      f"{when}: {cause.message}"), "")])
        tail = without_startup(cause.tail)
        if tail:
            blocks.append([(f"last {len(tail)} lines of {cause.task}:", "")])
            blocks.extend([(f"  {printable(line)}", "")] for line in tail)
    if result.lines_lost:
        lost = ", ".join(f"{name} {n}" for name, n in result.lines_lost.items())
        blocks.append([("output lines not written", "bold yellow"), (f" (disk full?): {lost}", "")])
    blocks.append([(f"logs: {result.run_dir}/logs", "")])
    return blocks


def print_summary(
    result: JobResult, *, as_json: bool = False, stream: IO[str] | None = None
) -> None:
    from tfdist.data.plan import read  # data.json, beside summary.json

    out = stream or sys.stdout
    data = read(result.run_dir)
    if as_json:
        shown = result.to_dict()
        if data is not None:
            staging = {t.name: t.progress["staging"] for t in result.tasks if "staging" in t.progress}
            shown["data"] = {**data, "staging": staging}
        out.write(json.dumps(shown, indent=2) + "\n")
        return
    blocks = summary(result, data)
    if hasattr(out, "isatty") and out.isatty():
        _rich(blocks, out)
    else:
        out.write("".join(plain(block) + "\n" for block in blocks))
        out.flush()


def plain(block: Block) -> str:
    """One block as text: a line's pieces joined, a grid's columns aligned by two spaces."""
    if not isinstance(block, Grid):
        return "".join(text for text, _ in block)
    rows = [block.columns, *block.rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(block.columns))]
    lines = ("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def _rich(blocks: list[Block], out: IO[str]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out, highlight=False, soft_wrap=True)
    for block in blocks:
        if isinstance(block, Grid):
            table = Table(box=None, pad_edge=False, show_edge=False)
            for col in block.columns:
                table.add_column(col)
            for row in block.rows:
                table.add_row(*row)
            console.print(table)
        else:
            console.print(Text.assemble(*block))

"""The job-management commands of ``tfdist``: list, status, logs, stop, clean, metrics, plot
and tensorboard (their arguments are in :mod:`tfdist.cli.parser`); :mod:`tfdist.cli.main`
calls ``cmd_<name>``, which returns an exit code."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfdist.cli import format as fmt
from tfdist.cli.parser import MAX_STATUS_ROWS
from tfdist.errors import SpecError, warn
from tfdist.jobs.manage import describe
from tfdist.jobs.store import Store
from tfdist.safe_text import printable
from tfdist.states import JobState, TaskState, exit_text

if TYPE_CHECKING:
    from tfdist.supervisor.status import TaskStatus


def cmd_list(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.cli.run import parse_labels

    labels = parse_labels(args.labels)  # bad input: refused before the store is opened
    with contextlib.closing(Store()) as store:
        if labels:
            from tfdist.jobs.queries import JobFilter, jobs_page

            rows, _ = jobs_page(store, JobFilter(labels=tuple(labels.items())), 10**9)
        else:
            rows = store.jobs()
    if not args.all:
        rows = rows[:50]
    if args.json:
        print(json.dumps([r.to_dict(counts=True) for r in rows], indent=2))
        return 0
    if not rows:
        print("no jobs with these labels" if labels else
              "no jobs yet; start one with tfdist run or tfdist submit")
        return 0
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    columns = ["id", "name", "state", "tasks", "restarts", "started", "duration"]
    with_labels = any(r.labels for r in rows)
    for col in [*columns, "labels"] if with_labels else columns:
        table.add_column(col, no_wrap=col == "id")
    for r in rows:
        style = fmt.STYLE.get(r.state, "")
        tasks = str(r.task_count)
        if r.state is JobState.RUNNING:
            tasks = f"{r.tasks_running}/{r.task_count} running"
        cells = [r.id, r.name, f"[{style}]{r.state}[/]", tasks,
                 fmt.restarts_text(r, short=True), fmt.when(r.started_at or r.submitted_at),
                 fmt.duration(r)]
        if with_labels:  # label text has no markup characters (jobspec.labels)
            cells.append(" ".join(f"{k}={v}" for k, v in r.labels.items()))
        table.add_row(*cells)
    fmt.console().print(table)
    return 0


def cmd_status(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.data.plan import read, summary
    from tfdist.jobs.inputs import job_data

    with contextlib.closing(Store()) as store:
        status = describe(store, args.job, transitions=True)
        # which files each task got: the store's bounded record, else (a job recorded
        # before stores kept it) the run directory's data.json
        recorded = job_data(store, status.job.id, [t.name for t in status.tasks][:MAX_STATUS_ROWS])
    data = read(status.job.run_dir) if status.job.run_dir and (args.json or recorded is None) else None
    if recorded is None and data:
        recorded = summary(data)
    # each task's last staging, kept with its last progress (tfdist.supervisor.loop)
    staging = {t.name: t.progress["staging"] for t in status.tasks if "staging" in t.progress}
    if args.json:
        described = status.to_dict()
        if data or recorded:
            described["data"] = {**(data or recorded or {}), "staging": staging}
        print(json.dumps(described, indent=2))
        return 0
    from rich.markup import escape

    job = status.job
    console = fmt.console()
    style = fmt.STYLE.get(job.state, "")
    phase = f" ({job.shown_phase})" if job.shown_phase else ""
    console.print(f"[bold]job[/] {job.id}  [bold {style}]{job.state}[/]{phase}  "
                  f"({job.name}, {job.backend}{', detached' if job.detached else ''})")
    sup = job.supervisor_pid
    started = fmt.when(job.started_at or job.submitted_at)
    console.print(f"started {started}  duration {fmt.duration(job)}  "
                  f"restarts {fmt.restarts_text(job)}  supervisor pid {sup or '-'}")
    if job.state is JobState.LOST:
        console.print("[magenta]its supervisor (pid {}) is gone: killed, crashed or the machine "
                      "rebooted; the job's tasks were stopped with it[/]".format(sup or "-"))
    elif job.state is not job.recorded_state:
        console.print("[yellow]the job store missed the end of this job; shown from its run "
                      "directory's summary.json[/]")
    console.print(escape(f"run dir: {job.run_dir}"))
    if job.labels:  # label text has no markup or control characters (jobspec.labels)
        console.print("labels: " + " ".join(f"{k}={v}" for k, v in job.labels.items()), markup=False)
    if job.tensorboard_url and job.state is JobState.RUNNING:
        console.print(f"tensorboard: {job.tensorboard_url}", markup=False)
    _print_tasks(console, status.tasks, show_all=args.all)
    for line in fmt.data_lines(recorded, staging, MAX_STATUS_ROWS, job.goodput):
        console.print(printable(line), markup=False)
    current = {t.name: t.attempt for t in status.tasks}
    earlier = [a for a in status.attempts or () if a.attempt < current.get(a.task, 0)]
    if earlier:  # the restart history
        console.print("earlier attempts:")
        for a in earlier:
            why = f" ({a.reason})" if a.reason else ""
            console.print(escape(printable(f"  {a.task} attempt {a.attempt}: {a.state}, exit "
                                               f"{exit_text(a.exit_code)}{why}")))
    cause = job.root_cause
    if cause:  # the task's own words: shown as text (no markup, no terminal escapes)
        from tfdist.supervisor.result import cause_lines

        first, detail = cause_lines(cause)
        console.print(f"[bold red]root cause:[/] {escape(printable(first))}")
        if detail:
            console.print(escape(printable(f"  {detail}")))
    if job.metrics:
        shown = ", ".join(f"{k} {v}" for k, v in job.metrics.items())
        console.print(printable(f"final metrics: {shown}"), markup=False)
    if job.goodput:
        from tfdist.supervisor.goodput import summary_line

        so_far = " so far" if job.state is JobState.RUNNING else ""
        console.print(summary_line(job.goodput) + so_far + " (--json: by cause and attempt)",
                      markup=False)
    return 0


def _print_tasks(console: Any, tasks: Sequence[TaskStatus], *, show_all: bool) -> None:
    """The task table; above MAX_STATUS_ROWS tasks, counts per role and only the tasks that
    failed, stopped or restarted (unless ``show_all``)."""
    from rich.markup import escape
    from rich.table import Table

    from tfdist.jobs import usage as res

    shown = list(tasks)
    if len(shown) > MAX_STATUS_ROWS and not show_all:
        counts: dict[str, Counter[str]] = {}
        for t in shown:
            counts.setdefault(t.role, Counter())[t.state.value] += 1
        for role, by_state in counts.items():
            states = ", ".join(f"{n} {state}" for state, n in by_state.most_common())
            console.print(f"{role}: {sum(by_state.values())} tasks ({states})", markup=False)
        shown = [t for t in shown if t.state not in (TaskState.RUNNING, TaskState.SUCCEEDED) or t.restarts
                 or (t.state is TaskState.RUNNING and res.near_limit(t.usage))]
        shown = shown[:MAX_STATUS_ROWS]
        if shown:
            console.print(f"tasks that failed, stopped, restarted or near their memory limit "
                          f"({len(shown)} shown; --all lists every task):")
    sampled = any(t.usage for t in tasks)
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("task", "state", "attempt", "pid", "host", "port", "restarts", "exit",
                *(("cpu", "memory") if sampled else ()), "last progress"):
        table.add_column(col)
    for t in shown:
        port = (t.address or "").rpartition(":")[2] or "-"
        use = ((res.cpu_text(t.usage), res.memory_text(t.usage)
                + (" NEAR LIMIT" if t.state is TaskState.RUNNING and res.near_limit(t.usage) else ""))
               if sampled else ())
        table.add_row(t.name, str(t.state), str(t.attempt), str(t.pid or "-"), t.host or "-",
                      port, str(t.restarts), exit_text(t.exit_code), *use,
                      escape(printable(fmt.progress_text(t.progress))))
    if shown:
        console.print(table)
    near = [t.name for t in tasks if t.state is TaskState.RUNNING and res.near_limit(t.usage)]
    if near:
        names = ", ".join(near[:10]) + (f" and {len(near) - 10} more" if len(near) > 10 else "")
        console.print(f"[bold yellow]near the memory limit:[/] {escape(names)} (90% or more of "
                      "resources.memory: the kernel kills a task that goes over)")


def cmd_logs(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.jobs import manage as jobs

    if args.tail is not None and args.tail < 0:
        raise SpecError(f"logs: --tail: {args.tail} is not a number of lines; give 0 or more "
                        "(or leave it out for every line)")
    with contextlib.closing(Store()) as store:
        job = store.job(args.job)
        names = [t.name for t in store.tasks(job.id)]
        files = jobs.log_files(job, args.task, names)
        prefix = args.task is None
        if args.follow:
            jobs.follow(store, job.id, files, sys.stdout, prefix, args.tail)
            return 0
    for label, path in files:
        for line in jobs.tail_lines(path, args.tail):
            sys.stdout.write(f"[{label}] {line}\n" if prefix else line + "\n")
    return 0


def cmd_stop(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.jobs import manage as jobs

    grace = jobs.check_grace(args.grace)  # bad input: refused before any signal
    with contextlib.closing(Store()) as store:
        before = store.job(args.job)
        if not before.state.active:
            print(f"job {before.id} is not running ({before.state})")
            return 0
        after = jobs.stop(store, before.id, grace, echo=sys.stderr)
    print(f"job {after.id} {after.state}")
    return 0


def cmd_clean(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.jobs import manage as jobs

    age = jobs.parse_age(args.older_than)
    with contextlib.closing(Store()) as store:
        removed = jobs.clean(store, age, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for item in removed:
        job = item.job
        kept = job.run_dir or "no run directory"
        what = (f"and its run directory {item.removed_dir}" if item.removed_dir
                else f"(record only: {kept} is not a tfdist run directory, kept)")
        print(f"{verb} {job.id} ({job.state}) {what}")
        if item.error:
            warn(f"{job.id}: could not remove all of {item.removed_dir}: {item.error}")
    print(f"{verb} {len(removed)} job{'s' if len(removed) != 1 else ''}")
    return 0


def cmd_metrics(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.jobs import metrics

    with contextlib.closing(Store()) as store:
        job = store.job(args.job)
        rows = store.progress(job.id)
    start = job.started_at or job.submitted_at
    if args.format == "json":
        print(json.dumps(metrics.flatten(rows, start), indent=2))
    else:
        sys.stdout.write(metrics.to_csv(rows, start))
    return 0


def cmd_plot(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.jobs import metrics

    with contextlib.closing(Store()) as store:
        job = store.job(args.job)
        rows = store.progress(job.id)
    if not rows:
        raise SpecError(f"job {job.id} has no progress reports to plot yet")
    out = Path(args.output) if args.output else Path(job.run_dir or ".") / "metrics.png"
    metrics.plot(rows, out, title=job.id, start=job.started_at or job.submitted_at)
    print(out)
    return 0


def cmd_tensorboard(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.jobs import tensorboard as tboard

    with contextlib.closing(Store()) as store:
        job = store.job(args.job)
        return tboard.serve_job(store, job, port=args.port)


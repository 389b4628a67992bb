"""The job-management commands of ``tfdist``: submit, list, status, logs, stop, clean,
metrics, plot and tensorboard. :mod:`tfdist.cli` adds them with :func:`add_commands` and
dispatches through :data:`COMMANDS`; each returns an exit code."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfdist.errors import SpecError
from tfdist.jobs import describe
from tfdist.store import Store
from tfdist.supervisor.policy import budget_text


def add_commands(sub: Any, add_job_args: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("submit", help="start a job detached; prints the job id last")
    add_job_args(p)
    p.add_argument("--tensorboard", action="store_true", help="run TensorBoard with the job")
    p = sub.add_parser("list", help="the jobs in the job store")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help="every job (default: the last 50)")
    p = sub.add_parser("status", help="a job and each of its tasks")
    p.add_argument("job", help="job id (a unique prefix is enough)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("logs", help="a job's task logs")
    p.add_argument("job")
    p.add_argument("--task", default=None, help="one task, e.g. worker-1 (or 'supervisor')")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    p.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines")
    p = sub.add_parser("stop", help="stop a job: SIGTERM to its supervisor, SIGKILL after --grace")
    p.add_argument("job")
    p.add_argument("--grace", type=float, default=30.0, metavar="SECONDS")
    p = sub.add_parser("clean", help="remove ended jobs (run directories and records)")
    p.add_argument("--older-than", default="7d", metavar="AGE", help="e.g. 7d (default), 12h, 0")
    p.add_argument("--dry-run", action="store_true")
    p = sub.add_parser("metrics", help="a job's progress reports as CSV or JSON")
    p.add_argument("job")
    p.add_argument("--format", choices=["csv", "json"], default="csv")
    p = sub.add_parser("plot", help="PNG of loss and throughput per task over time")
    p.add_argument("job")
    p.add_argument("-o", "--output", default=None, help="PNG path (default <run_dir>/metrics.png)")
    p = sub.add_parser("tensorboard", help="TensorBoard on a job's logs; stops with the job")
    p.add_argument("job")
    p.add_argument("--port", type=int, default=0, help="default: any free port")


# -- formatting ----------------------------------------------------------------------------


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _duration(job: dict[str, Any]) -> str:
    start = job.get("started_at") or job.get("submitted_at")
    if not start:
        return "-"
    end = job.get("ended_at") or (time.time() if job["state"] in ("running", "submitted") else None)
    if end is None:
        return "-"
    s = max(0, int(end - start))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _exit(code: int | None) -> str:
    from tfdist.supervisor.policy import describe_exit

    if code is None:
        return "-"
    return str(code) if code >= 0 else describe_exit(code).removeprefix("killed by ")


def progress_text(p: dict[str, Any]) -> str:
    """``epoch 2/3 step 40 loss 0.3124 acc 0.91 1200 ex/s`` from a progress report."""
    if not p:
        return "-"
    parts = []
    if p.get("epoch") is not None:
        parts.append(f"epoch {p['epoch']}" + (f"/{p['epochs']}" if p.get("epochs") else ""))
    if p.get("step") is not None:
        parts.append(f"step {p['step']}")
    if isinstance(p.get("loss"), int | float):
        parts.append(f"loss {p['loss']:.4f}")
    for k, v in (p.get("metrics") or {}).items():
        if isinstance(v, int | float) and not k.startswith("val_") and len(parts) < 6:
            parts.append(f"{k} {v:.4f}")
    if isinstance(p.get("examples_per_sec"), int | float):
        parts.append(f"{p['examples_per_sec']:.0f} ex/s")
    if p.get("final"):
        parts.append("final")
    return " ".join(parts) or "-"


def _console() -> Any:
    from rich.console import Console

    # Piped output is read by scripts and people with wide windows: no wrapping at 80.
    width = None if sys.stdout.isatty() else 250
    return Console(highlight=False, soft_wrap=True, width=width)


_STYLE = {"succeeded": "green", "running": "cyan", "failed": "red", "lost": "magenta",
          "stopped": "yellow", "interrupted": "yellow", "submitted": "blue"}


# -- commands -------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import jobs
    from tfdist.cli import load_job

    job = load_job(args, command)
    options: dict[str, Any] = {}
    if args.backend == "ray" and args.ray_address:
        options["address"] = args.ray_address
    handle = jobs.submit(job, backend=args.backend, runs_root=args.runs_dir,
                         backend_options=options, tensorboard=args.tensorboard)
    print(f"submitted {handle.id}; follow it with: tfdist logs {handle.id} --follow")
    print(handle.id)
    return 0


def _restarts(job: dict[str, Any], *, short: bool = False) -> str:
    """The restart budget, ``1 of 3 used, 2 left`` (``short``: ``1/3``); the budget is
    recorded when the job starts, so a job not started yet shows only what it used."""
    used, budget = job["restarts_used"] or 0, job.get("max_restarts")
    if budget is None:
        return str(used) if short else f"{used} used"
    return f"{used}/{budget}" if short else budget_text(used, budget)


def cmd_list(args: argparse.Namespace, command: list[str]) -> int:
    with contextlib.closing(Store()) as store:
        rows = store.jobs()
    if not args.all:
        rows = rows[:50]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no jobs yet; start one with tfdist run or tfdist submit")
        return 0
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("id", "name", "state", "tasks", "restarts", "started", "duration"):
        table.add_column(col, no_wrap=col == "id")
    for r in rows:
        style = _STYLE.get(r["state"], "")
        tasks = str(r["task_count"])
        if r["state"] == "running":
            tasks = f"{r['tasks_running']}/{r['task_count']} running"
        table.add_row(r["id"], r["name"], f"[{style}]{r['state']}[/]", tasks,
                      _restarts(r, short=True), _when(r["started_at"] or r["submitted_at"]),
                      _duration(r))
    _console().print(table)
    return 0


def cmd_status(args: argparse.Namespace, command: list[str]) -> int:
    with contextlib.closing(Store()) as store:
        job = describe(store, args.job, transitions=True)
    if args.json:
        print(json.dumps(job, indent=2))
        return 0
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    style = _STYLE.get(job["state"], "")
    console.print(f"[bold]job[/] {job['id']}  [bold {style}]{job['state']}[/]  "
                  f"({job['name']}, {job['backend']}{', detached' if job['detached'] else ''})")
    sup = job["supervisor_pid"]
    console.print(f"started {_when(job['started_at'] or job['submitted_at'])}  duration {_duration(job)}  "
                  f"restarts {_restarts(job)}  supervisor pid {sup or '-'}")
    if job["state"] == "lost":
        console.print("[magenta]its supervisor (pid {}) is gone: killed, crashed or the machine "
                      "rebooted; the job's tasks were stopped with it[/]".format(sup or "-"))
    console.print(escape(f"run dir: {job['run_dir']}"))
    if job.get("tensorboard_url") and job["state"] == "running":
        console.print(f"tensorboard: {job['tensorboard_url']}", markup=False)
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("task", "state", "attempt", "pid", "host", "port", "restarts", "exit", "last progress"):
        table.add_column(col)
    for t in job["tasks"]:
        port = (t["address"] or "").rpartition(":")[2] or "-"
        table.add_row(t["name"], t["state"], str(t["attempt"]), str(t["pid"] or "-"), t["host"] or "-",
                      port, str(t["restarts"]), _exit(t["exit_code"]), escape(progress_text(t["progress"])))
    console.print(table)
    current = {t["name"]: t["attempt"] for t in job["tasks"]}
    earlier = [a for a in job.get("attempts", []) if a["attempt"] < current.get(a["task"], 0)]
    if earlier:  # the restart history
        console.print("earlier attempts:")
        for a in earlier:
            console.print(escape(f"  {a['task']} attempt {a['attempt']}: {a['state']}, exit "
                                 f"{_exit(a['exit_code'])}" + (f" ({a['reason']})" if a["reason"] else "")))
    cause = job.get("root_cause")
    if cause:
        console.print(f"[bold red]root cause:[/] {escape(cause['task'])} {escape(cause['description'])}: "
                      f"{escape(cause['message'])}")
    if job.get("metrics"):
        console.print("final metrics: " + ", ".join(f"{k} {v}" for k, v in job["metrics"].items()),
                      markup=False)
    return 0


def cmd_logs(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import jobs

    with contextlib.closing(Store()) as store:
        job = store.job(args.job)
        names = [t["name"] for t in store.tasks(job["id"])]
        files = jobs.log_files(job, args.task, names)
        prefix = args.task is None
        if args.follow:
            jobs.follow(store, job["id"], files, sys.stdout, prefix, args.tail)
            return 0
    for label, path in files:
        for line in jobs.tail_lines(path, args.tail):
            sys.stdout.write(f"[{label}] {line}\n" if prefix else line + "\n")
    return 0


def cmd_stop(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import jobs

    with contextlib.closing(Store()) as store:
        before = store.job(args.job)
        if before["state"] not in ("running", "submitted"):
            print(f"job {before['id']} is not running ({before['state']})")
            return 0
        after = jobs.stop(store, before["id"], args.grace, echo=sys.stderr)
    print(f"job {after['id']} {after['state']}")
    return 0


def cmd_clean(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import jobs

    age = jobs.parse_age(args.older_than)
    with contextlib.closing(Store()) as store:
        removed = jobs.clean(store, age, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for job in removed:
        print(f"{verb} {job['id']} ({job['state']}) {job['run_dir']}")
    print(f"{verb} {len(removed)} job{'s' if len(removed) != 1 else ''}")
    return 0


def cmd_metrics(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import metrics

    with contextlib.closing(Store()) as store:
        job = store.job(args.job)
        rows = store.progress(job["id"])
    start = job["started_at"] or job["submitted_at"]
    if args.format == "json":
        print(json.dumps(metrics.flatten(rows, start), indent=2))
    else:
        sys.stdout.write(metrics.to_csv(rows, start))
    return 0


def cmd_plot(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import metrics

    with contextlib.closing(Store()) as store:
        job = store.job(args.job)
        rows = store.progress(job["id"])
    if not rows:
        raise SpecError(f"job {job['id']} has no progress reports to plot yet")
    out = Path(args.output) if args.output else Path(job["run_dir"]) / "metrics.png"
    metrics.plot(rows, out, title=job["id"], start=job["started_at"] or job["submitted_at"])
    print(out)
    return 0


def cmd_tensorboard(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import tboard

    with contextlib.closing(Store()) as store:
        job = store.job(args.job)
        return tboard.serve_job(store, job, port=args.port)


COMMANDS: dict[str, Callable[[argparse.Namespace, list[str]], int]] = {
    "submit": cmd_submit,
    "list": cmd_list,
    "status": cmd_status,
    "logs": cmd_logs,
    "stop": cmd_stop,
    "clean": cmd_clean,
    "metrics": cmd_metrics,
    "plot": cmd_plot,
    "tensorboard": cmd_tensorboard,
}

"""Every command's arguments, with argparse alone: building the parser imports nothing of
tfdist, so ``tfdist --help`` is fast and ``tfdist run`` pays only for what running needs
(:mod:`tfdist.cli.main` imports a command's module when that command runs)."""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn

from tfdist.errors import SpecError
from tfdist.runs import DEFAULT_RUNS

#: Above this many tasks ``status`` shows counts per role and the tasks worth a look.
MAX_STATUS_ROWS = 20


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every bad input
        """The CLI prints ``tfdist: error: `` before the message, so the top-level parser
        adds nothing and a command's parser only its name (``run: argument --workers: ...``);
        a missing or unknown command is said in the user's words, not argparse's
        (``argument cmd: invalid choice``)."""
        where = self.prog.removeprefix("tfdist").strip()
        commands = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        dest = commands[0].dest if commands else None
        if dest and (message.startswith(f"argument {dest}:")
                     or message == f"the following arguments are required: {dest}"):
            names = ", ".join(commands[0].choices or ())
            bad = re.search(r"invalid choice: (.*?) \(choose from", message)
            said = f"unknown command {bad.group(1)}" if bad else "give a command"
            message = f"{said}; the commands are {names} (tfdist {where + ' ' if where else ''}--help)"
        raise SpecError(f"{where}: {message}" if where else message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfdist", description="Run distributed TensorFlow training jobs.")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    p = sub.add_parser("run", help="run a job in the foreground")
    add_job_args(p)
    p.add_argument("--quiet", "-q", action="store_true", help="only the summary")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show TensorFlow's start-up messages and each task's Keras progress bars too "
                        "(each task's log keeps them anyway)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--run-dir", default=None, help=argparse.SUPPRESS)  # set by submit
    # set by submit: with --quiet, tfdist's own lines (failed; restarting) still go to supervisor.log
    p.add_argument("--notes", action="store_true", default=None, help=argparse.SUPPRESS)
    p = sub.add_parser("submit", help="start a job detached; prints the job id last")
    add_job_args(p)
    p.add_argument("--like", default=None, metavar="JOB",
                   help="run a stored job's spec again (its job.yaml), with --set and the other "
                        "flags applied on top")
    p = sub.add_parser("render", help="print a job's Kubernetes manifests")
    p.add_argument("jobfile")
    p.add_argument("--backend", default="kubernetes", choices=["kubernetes"])
    p.add_argument("--as", dest="as_", default="jobset", choices=["jobset", "tfjob", "jobs"])
    p.add_argument("--set", dest="overrides", action="append", default=[])
    _in_module(sub, "run")  # the module under tfdist.cli that runs each command (cli.main)
    add_job_commands(sub)
    _in_module(sub, "jobs")
    add_env_commands(sub)
    _in_module(sub, "env")
    add_store_commands(sub)
    _in_module(sub, "store")
    add_ui_command(sub)
    _in_module(sub, "ui")
    return parser


def _in_module(sub: Any, module: str) -> None:
    """The commands added since the last call run in ``tfdist.cli.<module>``."""
    for command in sub.choices.values():
        if command.get_default("module") is None:
            command.set_defaults(module=module)


def add_job_args(p: argparse.ArgumentParser) -> None:
    """The arguments ``run`` and ``submit`` share."""
    p.add_argument("jobfile", nargs="?", help="job file (YAML or a Kubeflow TFJob)")
    p.add_argument("--backend", default="local", help="local (default), kubernetes, ray, spark or yarn")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a job file key, e.g. roles.worker.replicas=3",
    )
    quick = p.add_argument_group("quick form (no job file): tfdist run [options] -- COMMAND")
    quick.add_argument("--chief", action="store_true", help="add a chief task")
    quick.add_argument("--workers", type=int, default=0, metavar="N")
    quick.add_argument("--ps", type=int, default=0, metavar="N")
    quick.add_argument("--evaluator", action="store_true")
    quick.add_argument("--strategy", default=None)
    quick.add_argument("--name", default=None)
    quick.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--runs-dir", default=DEFAULT_RUNS, help="where run directories go")
    p.add_argument("--ray-address", default=None, help="Ray cluster: auto, HOST:PORT or ray://...")
    p.add_argument("--spark-master", default=None,
                   help="Spark master: local[N], spark://HOST:PORT, k8s://..., yarn")
    p.add_argument("--tensorboard", action="store_true", help="run TensorBoard with the job")
    p.add_argument("--label", dest="labels", action="append", default=[], metavar="KEY=VALUE",
                   help="a label kept with the job (labels: in the job file), e.g. team=vision; "
                        "repeatable; tfdist list --label filters by it")


def add_job_commands(sub: Any) -> None:
    """The job-management subcommands (submit is added with run, as it takes the same arguments)."""
    p = sub.add_parser("list", help="the jobs in the job store")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help="every job (default: the last 50)")
    p.add_argument("--label", dest="labels", action="append", default=[], metavar="KEY=VALUE",
                   help="only jobs with this label (repeatable: every one)")
    p = sub.add_parser("status", help="a job and each of its tasks")
    p.add_argument("job", help="job id (a unique prefix is enough)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help=f"every task (default: counts per role above "
                   f"{MAX_STATUS_ROWS} tasks)")
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


def add_env_commands(sub: Any) -> None:
    """``env list`` and ``env clean``."""
    p = sub.add_parser("env", help="cached per-job Python environments: list, clean")
    env_sub = p.add_subparsers(dest="env_cmd", required=True, parser_class=type(p))
    q = env_sub.add_parser("list", help="cached environments: size, requirements, jobs, last use")
    q.add_argument("--json", action="store_true")
    q = env_sub.add_parser("clean", help="remove environments no running job uses")
    q.add_argument("keys", nargs="*", metavar="ENV", help="environment keys (a unique prefix is enough)")
    q.add_argument("--unused", action="store_true", help="every environment no running job uses")
    q.add_argument("--dry-run", action="store_true")


def add_store_commands(sub: Any) -> None:
    """``store migrate``."""
    p = sub.add_parser("store", help="the job store: migrate a history into PostgreSQL")
    store_sub = p.add_subparsers(dest="store_cmd", required=True, parser_class=type(p))
    q = store_sub.add_parser("migrate", help="copy a job history (default: this user's SQLite "
                             "store) into another store, e.g. a team's PostgreSQL")
    q.add_argument("--to", required=True, metavar="URL", help="postgresql://USER@HOST/DATABASE")
    q.add_argument("--from", dest="source", default=None, metavar="STORE",
                   help="the store to copy (default $TFDIST_HOME/jobs.db)")


def add_ui_command(sub: Any) -> None:
    p = sub.add_parser("ui", help="the dashboard: jobs, tasks, logs and curves in a browser")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs the printed token)")
    p.add_argument("--port", type=int, default=8470, help="default 8470; 0 picks a free port")

"""The ``tfdist`` command: parse, call the library, print.

Expected errors (:class:`~tfdist.errors.TfdistError`) become one line on stderr and the
error's exit code; ``run`` exits 0 (succeeded), 1 (failed), 2 (bad input), 130 (interrupted).
Only argparse is imported up front: each command imports what it needs, so ``--help`` and
``list`` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from tfdist.cli import env, jobs, run
from tfdist.errors import SpecError, TfdistError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every bad input
        raise SpecError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfdist", description="Run distributed TensorFlow training jobs.")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    p = sub.add_parser("run", help="run a job in the foreground")
    run.add_job_args(p)
    p.add_argument("--quiet", "-q", action="store_true", help="only the summary")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--run-dir", default=None, help=argparse.SUPPRESS)  # set by submit
    p = sub.add_parser("submit", help="start a job detached; prints the job id last")
    run.add_job_args(p)
    p = sub.add_parser("render", help="print a job's Kubernetes manifests")
    p.add_argument("jobfile")
    p.add_argument("--backend", default="kubernetes", choices=["kubernetes"])
    p.add_argument("--as", dest="as_", default="jobset", choices=["jobset", "tfjob", "jobs"])
    p.add_argument("--set", dest="overrides", action="append", default=[])
    jobs.add_commands(sub)
    env.add_commands(sub)
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace, list[str]], int]] = {
    "run": run.cmd_run,
    "submit": run.cmd_submit,
    "render": run.cmd_render,
    **jobs.COMMANDS,
    **env.COMMANDS,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.cmd](args, command)
    except TfdistError as err:
        print(f"tfdist: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("tfdist: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

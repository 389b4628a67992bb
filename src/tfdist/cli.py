"""The ``tfdist`` command: parse, call the library, print.

Expected errors (:class:`~tfdist.errors.TfdistError`) become one line on stderr and the
error's exit code; ``run`` exits 0 (succeeded), 1 (failed), 2 (bad input), 130 (interrupted).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, NoReturn

from tfdist.errors import SpecError, TfdistError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every bad input
        raise SpecError(f"{self.prog}: {message}")


def _add_job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobfile", nargs="?", help="job file (YAML or a Kubeflow TFJob)")
    p.add_argument("--backend", default="local", help="local (default), kubernetes or ray")
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
    p.add_argument("--runs-dir", default="tfdist-runs", help="where run directories go")
    p.add_argument("--ray-address", default=None, help="Ray cluster: auto, HOST:PORT or ray://...")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfdist", description="Run distributed TensorFlow training jobs.")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run a job in the foreground")
    _add_job_args(run)
    run.add_argument("--quiet", "-q", action="store_true", help="only the summary")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.add_argument("--run-dir", default=None, help=argparse.SUPPRESS)  # set by submit
    run.add_argument("--tensorboard", action="store_true", help="run TensorBoard with the job")
    render = sub.add_parser("render", help="print a job's Kubernetes manifests")
    render.add_argument("jobfile")
    render.add_argument("--backend", default="kubernetes", choices=["kubernetes"])
    render.add_argument("--as", dest="as_", default="jobset", choices=["jobset", "tfjob", "jobs"])
    render.add_argument("--set", dest="overrides", action="append", default=[])
    from tfdist import jobs_cli

    jobs_cli.add_commands(sub, _add_job_args)
    return parser


def load_job(args: argparse.Namespace, command: list[str]) -> Any:
    from tfdist import spec

    if args.jobfile:
        if command:
            raise SpecError("give either a job file or '-- COMMAND', not both")
        return spec.load(args.jobfile, args.overrides)
    if not command:
        raise SpecError(
            "give a job file, or the quick form: tfdist run --workers 2 -- python train.py"
        )
    job = spec.quick(
        command,
        name=args.name or "job",
        chief=args.chief,
        workers=args.workers,
        ps=args.ps,
        evaluator=args.evaluator,
        strategy=args.strategy,
        env=args.env,
    )
    if args.overrides:
        job = spec.from_dict(spec.apply_overrides(job.to_dict(), args.overrides, "--set"), "--set")
    return job


def cmd_run(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import api
    from tfdist.report import print_summary

    job = load_job(args, command)
    options: dict[str, Any] = {}
    if args.backend == "ray" and args.ray_address:
        options["address"] = args.ray_address
    # SIGTERM and SIGHUP stop the job like Ctrl-C does: every task is stopped first.
    from tfdist.supervisor import interrupts

    interrupts.install()
    from tfdist.live import observer_for

    # the live table on a terminal (plain lines when piped), TensorBoard if asked
    view = observer_for(quiet=args.quiet, as_json=args.json, tensorboard=args.tensorboard)
    with view or contextlib.nullcontext():
        result = api.run(
            job,
            backend=args.backend,
            runs_root=args.runs_dir,
            quiet=args.quiet,
            backend_options=options,
            run_dir=Path(args.run_dir) if args.run_dir else None,
            observer=view,
        )
    print_summary(result, as_json=args.json)
    return result.exit_code


def cmd_render(args: argparse.Namespace) -> int:
    from tfdist import spec
    from tfdist.backends.k8s import manifests

    job = spec.load(args.jobfile, args.overrides)
    sys.stdout.write(manifests.to_yaml(manifests.render(job, args.as_)))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    try:
        args = build_parser().parse_args(argv)
        if args.cmd == "run":
            return cmd_run(args, command)
        if args.cmd == "render":
            return cmd_render(args)
        from tfdist import jobs_cli

        if args.cmd in jobs_cli.COMMANDS:
            return jobs_cli.COMMANDS[args.cmd](args, command)
        raise SpecError(f"unknown command {args.cmd}")
    except TfdistError as err:
        print(f"tfdist: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("tfdist: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""``tfdist run``, ``submit`` and ``render``: build the job from a file or the quick form,
then run it here, start it detached, or print its manifests."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tfdist.errors import SpecError, warn

if TYPE_CHECKING:
    from tfdist.jobspec.model import JobSpec


def parse_labels(given: list[str]) -> dict[str, str]:
    """``--label KEY=VALUE`` flags as a mapping; a bad one is a one-line SpecError."""
    from tfdist.jobspec import labels

    found = {}
    for text in given:
        try:
            key, value = labels.parse(text)
        except ValueError as err:
            raise SpecError(str(err)) from None
        found[key] = value
    return found


def load_job(args: argparse.Namespace, command: list[str]) -> JobSpec:
    """The job of ``run``/``submit`` with its ``--label`` flags: every check that needs no
    backend, before anything starts."""
    import dataclasses

    given = parse_labels(getattr(args, "labels", []))
    job = _load_spec(args, command)
    return dataclasses.replace(job, labels={**job.labels, **given}) if given else job


def _like(args: argparse.Namespace, command: list[str]) -> JobSpec:
    """``submit --like JOB``: the stored job's spec, the quick form's flags and --set on top."""
    import contextlib

    from tfdist import runs
    from tfdist.jobs.store import Store
    from tfdist.jobs.submit import spec_like
    from tfdist.jobspec import load

    if args.jobfile or command:
        raise SpecError("--like: it runs the stored job's spec again; give no job file or "
                        "'-- COMMAND' with it (change it with --set)")
    with contextlib.closing(Store()) as store:
        stored = store.job(args.like)
    path = Path(stored.run_dir or ".") / runs.JOB_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"--like: cannot read job {stored.id}'s spec {path}: "
                        f"{getattr(err, 'strerror', None) or err}") from None
    quick = load.quick_settings(name=args.name, chief=args.chief, workers=args.workers, ps=args.ps,
                                evaluator=args.evaluator, strategy=args.strategy, env=args.env)
    job = spec_like(stored, text, [*quick, *args.overrides])
    job.require_commands()
    return job


def _load_spec(args: argparse.Namespace, command: list[str]) -> JobSpec:
    """The job of ``run``/``submit``: every check that needs no backend, before anything starts
    (a role whose TFJob container has no command cannot start: refused here, in one line)."""
    from tfdist.jobspec import load

    if getattr(args, "like", None):
        return _like(args, command)
    if args.jobfile:
        if command:
            raise SpecError("give either a job file or '-- COMMAND', not both")
        notes: list[str] = []
        # the quick form's flags mean what --set says (before the --set settings, which win)
        given = load.quick_settings(name=args.name, chief=args.chief, workers=args.workers, ps=args.ps,
                                    evaluator=args.evaluator, strategy=args.strategy, env=args.env)
        job = load.from_file(args.jobfile, [*given, *args.overrides], notes)
        job.require_commands()
        if args.backend != "kubernetes":
            for note in notes:  # once, before the run's own output
                warn(note)
        return job
    if not command:
        raise SpecError(
            "give a job file, or the quick form: tfdist run --workers 2 -- python train.py"
        )
    return load.quick(
        command,
        name=args.name,
        chief=args.chief,
        workers=args.workers,
        ps=args.ps,
        evaluator=args.evaluator,
        strategy=args.strategy,
        env=args.env,
        overrides=args.overrides,
    )


def check_tensorboard(args: argparse.Namespace) -> None:
    """``--tensorboard`` without TensorBoard installed is said before anything is made: the
    run directory and record of a job that never starts (or, for ``submit``, a detached
    supervisor that fails after the id was printed) were left behind."""
    if args.tensorboard:
        from tfdist.jobs.tensorboard import command as tensorboard_command

        tensorboard_command()


def cmd_run(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist import api
    from tfdist.backends.base import BackendOptions
    from tfdist.supervisor import interrupts

    job = load_job(args, command)
    check_tensorboard(args)
    # SIGTERM and SIGHUP stop the job like Ctrl-C does: every task is stopped first.
    interrupts.install()
    view = None
    if not args.quiet or args.tensorboard:  # the live table (rich) only when something shows
        from tfdist.cli.live import observer_for

        # the live table on a terminal (plain lines when piped), TensorBoard if asked
        view = observer_for(quiet=args.quiet, as_json=args.json, tensorboard=args.tensorboard)
    result = api.run(  # it enters the view (a context manager) once the job's checks pass
        job,
        backend=args.backend,
        options=BackendOptions.from_args(args),
        quiet=args.quiet,
        notes=args.notes,
        verbose=args.verbose,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        observer=view,
    )
    from tfdist.cli.report import print_summary  # rich, after the run: it never delays a task

    print_summary(result, as_json=args.json)
    return result.exit_code


def cmd_submit(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.backends.base import BackendOptions
    from tfdist.jobs.submit import submit

    job = load_job(args, command)
    check_tensorboard(args)
    handle = submit(job, backend=args.backend, options=BackendOptions.from_args(args),
                    tensorboard=args.tensorboard)
    print(f"submitted {handle.id}; follow it with: tfdist logs {handle.id} --follow")
    print(handle.id)
    return 0


def cmd_render(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.backends.k8s import manifests, names
    from tfdist.jobspec import load

    job = load.from_file(args.jobfile, args.overrides)
    sys.stdout.write(manifests.to_yaml(manifests.render(job, args.as_)))
    unshared = names.unshared_saves(job)
    if unshared:  # after the manifests, on stderr: what is piped to kubectl stays whole
        warn(unshared)
    return 0

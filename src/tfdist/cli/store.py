"""``tfdist store migrate --to URL [--from PATH]``: bring a job history into another store
(see :mod:`tfdist.jobs.migrate`)."""

from __future__ import annotations

import argparse
import contextlib

from tfdist.errors import SpecError
from tfdist.jobs.location import StoreLocation, default_path, parse


def cmd_migrate(args: argparse.Namespace) -> int:
    from tfdist.jobs.migrate import migrate
    from tfdist.jobs.store import Store

    source = parse(args.source, "--from") if args.source is not None else StoreLocation(path=default_path())
    target = parse(args.to, "--to")
    if source == target:
        raise SpecError(f"--to: {target} is the store to copy from; name another store")
    if source.path is not None and not source.path.is_file():
        raise SpecError(f"--from: {source} is not a file; give the SQLite job store to copy "
                        "(default $TFDIST_HOME/jobs.db)")
    with contextlib.closing(Store(source)) as src, contextlib.closing(Store(target)) as dst:
        done = migrate(src, dst)
    rows = ", ".join(f"{n} {table}" for table, n in done.copied.items() if table != "jobs")
    print(f"copied {done.copied.get('jobs', 0)} jobs ({rows}) from {source} to {target}"
          + (f"; {done.skipped_jobs} already there were skipped" if done.skipped_jobs else ""))
    return 0


def cmd_store(args: argparse.Namespace, command: list[str]) -> int:
    return cmd_migrate(args)

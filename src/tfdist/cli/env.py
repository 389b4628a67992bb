"""``tfdist env list`` and ``tfdist env clean``: the cached per-job Python environments
(see :mod:`tfdist.pyenv`) — what is there, its size, which jobs used it and when, and
removing the ones no running job uses."""

from __future__ import annotations

import argparse
import json

from tfdist.cli.format import when
from tfdist.errors import SpecError


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def cmd_list(args: argparse.Namespace) -> int:
    from tfdist.pyenv.cache import cached

    envs = cached()
    if args.json:
        print(json.dumps([e.to_dict() for e in envs], indent=2))
        return 0
    if not envs:
        print("no cached Python environments (a job's python.requirements builds one)")
        return 0
    for e in envs:
        reqs = " ".join(e.meta.get("requirements") or []) or "-"
        if e.meta.get("requirements_file"):
            reqs += f" -r {e.meta['requirements_file']}"
        state = "in use" if e.running else ("unfinished" if not e.complete else "idle")
        jobs = ", ".join(e.jobs[-5:]) + (f" (+{len(e.jobs) - 5})" if len(e.jobs) > 5 else "")
        print(f"{e.key}  {_mb(e.size):>9}  {state:<10}  last used {when(e.last_used)}  {reqs}")
        print(f"    jobs: {jobs or '-'}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from tfdist.pyenv.cache import cached, remove

    envs = cached()
    if args.keys:
        chosen = []
        for key in args.keys:
            hits = [e for e in envs if e.key.startswith(key)]
            if len(hits) != 1:
                what = "no" if not hits else "more than one"
                raise SpecError(f"env clean: {what} cached environment matches '{key}'; see tfdist env list")
            chosen.append(hits[0])
    elif args.unused:
        chosen = envs  # remove() keeps, and says so, each one a running job uses
    else:
        raise SpecError("env clean: name environments (see tfdist env list) or give --unused")
    kept = 0
    for e in chosen:
        if args.dry_run:
            print(f"would remove {e.key} ({_mb(e.size)})")
            continue
        why = remove(e)
        if why:
            kept += 1
            print(f"kept {e.key}: {why}")
        else:
            print(f"removed {e.key} ({_mb(e.size)})")
    return 1 if kept and args.keys else 0


def cmd_env(args: argparse.Namespace, command: list[str]) -> int:
    return {"list": cmd_list, "clean": cmd_clean}[args.env_cmd](args)


"""What one ``exec`` can carry: the kernel's limits on a task's arguments and environment.

Linux refuses to start a program (E2BIG) when one argument or one ``NAME=value`` string is
longer than MAX_ARG_STRLEN (32 pages: 128 KiB with 4 KiB pages), or when all of them together,
with a pointer each, pass ARG_MAX (a quarter of the stack limit). Found only at the exec, such
a job has already made its run directory and fails as a job (exit 1), on every restart;
checked here, it is bad input (exit 2) before anything starts, like a missing command.

Pure: the caller passes the environment a task inherits (only the local backend knows it; on
a cluster the per-string limit still holds in every container and process).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from tfdist.contract import ROLES
from tfdist.errors import SpecError

if TYPE_CHECKING:
    from tfdist.jobspec.model import JobSpec

#: Bytes a task's environment gets from tfdist besides the job's (TF_CONFIG, TFDIST_*, PATH,
#: LD_PRELOAD), per task of the job and in all: an allowance, since addresses are not known
#: yet (TF_CONFIG holds ~18-35 bytes per task).
PLANNED_PER_TASK = 40
PLANNED_FIXED = 8192


def max_arg_strlen() -> int | None:
    """The kernel's limit on one argument or environment string, NUL included (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    return 32 * os.sysconf("SC_PAGE_SIZE")


def arg_max() -> int | None:
    """The limit on arguments and environment together, where the system says it."""
    try:
        value = os.sysconf("SC_ARG_MAX")
    except (OSError, ValueError):
        return None
    return value if value > 0 else None


def _size(text: str) -> int:
    return len(os.fsencode(text)) + 1  # the terminating NUL counts


def _kib(n: int) -> str:
    return f"{n:,} bytes ({n / 1024:,.0f} KiB)"


def string_problem(strings: Iterable[tuple[str, str]], limit: int) -> str | None:
    """The first ``(field, text)`` longer than ``limit`` as one error line, else None."""
    for where, text in strings:
        size = _size(text)
        if size > limit:
            return (f"{where}: {_kib(size)}, over the {_kib(limit)} the kernel passes in one argument "
                    "or environment string (MAX_ARG_STRLEN); pass it in a file instead")
    return None


def total_problem(argv: list[str], env: Mapping[str, str], extra: int, limit: int, role: str) -> str | None:
    """The role's whole exec (arguments, environment, a pointer each) over ``limit``."""
    strings = [*argv, *(f"{k}={v}" for k, v in env.items())]
    size = sum(_size(s) for s in strings) + 8 * (len(strings) + 2) + extra
    if size <= limit:
        return None
    return (f"roles.{role}: its command and environment come to about {_kib(size)}, over the "
            f"{_kib(limit)} this system lets one program start with (ARG_MAX); pass large "
            "values in a file, or start tfdist with a smaller environment")


def role_strings(job: JobSpec, role: str) -> list[tuple[str, str]]:
    """Every argument and environment string of the role, named by the field it comes from."""
    spec = job.role(role)
    where = f"roles.{role}.command" if spec.command else "command"
    out = [(f"{where}[{i}]", arg) for i, arg in enumerate(job.command_for(role))]
    out += [(f"env.{k}", f"{k}={v}") for k, v in job.env.items() if k not in spec.env]
    out += [(f"roles.{role}.env.{k}", f"{k}={v}") for k, v in spec.env.items()]
    return out


def check_job(job: JobSpec, inherited: Mapping[str, str] | None = None) -> None:
    """SpecError when a task of ``job`` could not be started for its size. ``inherited``: the
    environment its tasks start from (tfdist's own, on the local backend), which counts toward
    ARG_MAX; None where it is not known here (a cluster's nodes)."""
    strlen, total = max_arg_strlen(), arg_max()
    tasks = sum(job.replicas(role) for role in ROLES)
    for role in ROLES:
        if not job.replicas(role):
            continue
        strings = role_strings(job, role)
        if strlen is not None:
            problem = string_problem(strings, strlen)
            if problem:
                raise SpecError(problem)
        if inherited is not None and total is not None:
            env = {**inherited, **job.env, **job.role(role).env}
            extra = PLANNED_FIXED + PLANNED_PER_TASK * tasks
            problem = total_problem(job.command_for(role), env, extra, total, role)
            if problem:
                raise SpecError(problem)

"""What is in the environment cache, and removing what no running job uses.

An environment is in use while any process that recorded a use of it (a job's supervisor,
see :func:`tfdist.pyenv.build.record_use`) is alive with the same start time. Removal takes
the environment's lock (a build or a job taking it in that moment keeps it), renames the
directory out of the cache in one step, then deletes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdist.pyenv.build import LOCK_SUFFIX, META, USES, envs_root


@dataclass
class CachedEnv:
    """One environment in the cache, as ``tfdist env list`` shows it."""

    key: str
    path: Path
    complete: bool
    size: int
    meta: dict[str, Any] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    last_used: float | None = None
    running: int = 0  # processes using it now

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "path": str(self.path), "complete": self.complete, "size": self.size,
            "requirements": self.meta.get("requirements", []), "tool": self.meta.get("tool"),
            "built_at": self.meta.get("built_at"), "jobs": self.jobs, "last_used": self.last_used,
            "running": self.running,
        }


def tree_size(path: Path) -> int:
    """Bytes of every file under ``path`` (symbolic links not followed)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _alive(row: dict[str, Any]) -> bool:
    from tfdist.pids import same_process

    pid, start = row.get("pid"), row.get("start")
    if not isinstance(pid, int) or start is None:
        return False
    return same_process(pid, float(start))


def uses(path: Path) -> list[dict[str, Any]]:
    rows = []
    with contextlib.suppress(OSError):
        for line in (path / USES).read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


def describe(path: Path) -> CachedEnv:
    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        meta = json.loads((path / META).read_text())
    rows = uses(path)
    jobs = list(dict.fromkeys(r["run"] or r["job"] for r in rows if r.get("job")))
    # A run's row supersedes its job's row made while checking (same pid, no run yet).
    runs = {r["job"] for r in rows if r.get("run")}
    jobs = [j for j in jobs if j not in runs]
    return CachedEnv(
        key=path.name, path=path, complete=bool(meta), size=tree_size(path), meta=meta, jobs=jobs,
        last_used=max((r.get("time", 0.0) for r in rows), default=None),
        running=len({r.get("pid") for r in rows if _alive(r)}),
    )


def cached() -> list[CachedEnv]:
    """Every environment directory in the cache, most recently used first."""
    root = envs_root()
    if not root.is_dir():
        return []
    found = [describe(p) for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return sorted(found, key=lambda e: -(e.last_used or e.meta.get("built_at") or 0.0))


def remove(env: CachedEnv) -> str | None:
    """Remove ``env`` unless a job uses it now; returns why it was kept, or None."""
    with open(env.path.parent / (env.key + LOCK_SUFFIX), "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "being built or taken by a job right now"
        try:
            if any(_alive(r) for r in uses(env.path)):
                return "in use by a running job"
            trash = env.path.parent / f".trash-{env.key}-{os.getpid()}"
            os.rename(env.path, trash)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    shutil.rmtree(trash, ignore_errors=True)
    return None

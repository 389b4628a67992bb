"""The job's working directory as it travels to the executors: one ``.tar.gz`` archive that
Spark unpacks in each executor's directory (``spark.ship_workdir``), refused when too big.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

from tfdist.errors import SpecError
from tfdist.runs import DEFAULT_RUNS

#: Never shipped with the working directory.
WORKDIR_EXCLUDES = {".git", ".venv", "venv", ".tox", "node_modules", "__pycache__", ".pytest_cache",
                    ".mypy_cache", ".ruff_cache", DEFAULT_RUNS}
ARCHIVE_ALIAS = "tfdist-workdir"

#: A workdir bigger than this is refused rather than packed (a run started from $HOME or
#: /tmp would pack everything under it): say spark.ship_workdir: false, or use a project dir.
MAX_WORKDIR_BYTES = 256 * 1024 * 1024
MAX_WORKDIR_FILES = 20000


def shipped(workdir: Path, skip: list[Path]) -> Iterator[Path]:
    """The files of ``workdir`` a backend ships (resolved paths): excluded names, ``skip``
    paths and ``.pyc`` files left out; the Spark, YARN and Kubernetes backends all ship these."""
    root = workdir.resolve()
    skipped = {p.resolve() for p in skip}
    for here, dirs, files in os.walk(root):
        base = Path(here)
        dirs[:] = [d for d in dirs if d not in WORKDIR_EXCLUDES and (base / d).resolve() not in skipped]
        for f in files:
            if not f.endswith(".pyc"):
                yield base / f


def workdir_problem(workdir: Path, skip: list[Path]) -> str | None:
    """Why ``workdir`` is too big to ship (stops counting at the limits), or None."""
    size = 0
    for count, path in enumerate(shipped(workdir, skip), 1):
        with contextlib.suppress(OSError):
            size += path.lstat().st_size
        if size > MAX_WORKDIR_BYTES or count > MAX_WORKDIR_FILES:
            return (f"more than {MAX_WORKDIR_BYTES >> 20} MiB or {MAX_WORKDIR_FILES} files to ship "
                    f"(counting stopped at {count} files, {size >> 20} MiB)")
    return None


def refuse_too_big(workdir: Path, runs_root: Path, setting: str) -> None:
    """Refuse (SpecError, exit 2) a workdir too big to ship, naming ``setting`` (the
    backend's ``ship_workdir``) as the way out; the Spark and YARN backends both ship it."""
    big = workdir_problem(workdir, [runs_root])
    if big:
        raise SpecError(f"workdir: {workdir.resolve()} has {big}; run from the project's "
                        f"directory, or set {setting}: false")


def pack_workdir(workdir: Path, dest: Path, skip: list[Path]) -> int:
    """Pack ``workdir`` into the ``.tar.gz`` ``dest`` (a format Spark unpacks keeping file
    modes, so ``command: [./run.sh]`` still runs); excluded names and ``skip`` paths are left
    out. Returns how many files went in."""
    root = workdir.resolve()
    count = 0
    with tarfile.open(dest, "w:gz") as tar:
        for path in shipped(workdir, skip):
            if path.resolve() == dest.resolve():
                continue
            tar.add(path, path.relative_to(root).as_posix(), recursive=False)
            count += 1
    return count

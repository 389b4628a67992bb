"""Pure decisions of the Spark backend: which master, how many task slots, what travels.

No pyspark here (the checks run before a JVM starts, and the unit tests need no Spark).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tfdist.errors import SpecError
from tfdist.runs import DEFAULT_RUNS

_LOCAL = re.compile(r"^local(\[(\*|\d+)(,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")
#: Never shipped with the working directory.
WORKDIR_EXCLUDES = {".git", ".venv", "venv", ".tox", "node_modules", "__pycache__", ".pytest_cache",
                    ".mypy_cache", ".ruff_cache", DEFAULT_RUNS}
ARCHIVE_ALIAS = "tfdist-workdir"


def master_kind(master: str) -> str:
    """``local``, ``local-cluster``, ``standalone``, ``k8s`` or ``yarn``; SpecError otherwise."""
    if _LOCAL.match(master):
        return "local"
    if _LOCAL_CLUSTER.match(master):
        return "local-cluster"
    if master.startswith("spark://") and master_endpoints(master):
        return "standalone"
    if master.startswith("k8s://"):
        return "k8s"
    if master == "yarn":
        return "yarn"
    raise SpecError(
        f"spark.master: '{master}' is not a Spark master URL; use local[N], "
        "local-cluster[W,C,M], spark://HOST:PORT, k8s://https://HOST:PORT or yarn"
    )


def master_endpoints(master: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a ``spark://h1:p1,h2:p2`` URL (several with standby masters)."""
    out = []
    for part in master[len("spark://"):].split(","):
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit():
            return []
        out.append((host, int(port)))
    return out


def known_slots(master: str, task_cpus: int) -> int | None:
    """Task slots of a master whose size its URL says (local modes), else None."""
    m = _LOCAL.match(master)
    if m:
        n = m.group(2)
        cores = (os.cpu_count() or 1) if n in (None, "*") else int(n or 1)
        if m.group(1) is None:
            cores = 1
        return cores // task_cpus
    m = _LOCAL_CLUSTER.match(master)
    if m:
        return int(m.group(1)) * (int(m.group(2)) // task_cpus)
    return None


def standalone_slots(status: dict[str, Any], task_cpus: int) -> tuple[int, int, str]:
    """(slots in all, slots free now, a description) from a standalone master's JSON status."""
    alive = [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
    total = sum(int(w.get("cores", 0)) // task_cpus for w in alive)
    free = sum(int(w.get("coresfree", 0)) // task_cpus for w in alive)
    shown = ", ".join(f"{w.get('host')}: {w.get('cores')} cores ({w.get('coresfree')} free)"
                      for w in alive[:6])
    return total, free, f"{len(alive)} alive worker(s){': ' + shown if shown else ''}"


#: A status page larger than this is not read whole (a hostile or broken endpoint).
MAX_STATUS_BYTES = 8 << 20


def fetch_status(ui: str, timeout: float = 3.0) -> tuple[dict[str, Any] | None, str]:
    """A standalone master's JSON status page, or None and why it could not be read."""
    url = ui.rstrip("/") + "/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            data = json.loads(reply.read(MAX_STATUS_BYTES))
    except (OSError, ValueError) as err:  # refused, timed out, HTTP error, not JSON, bad URL
        reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or err
        return None, f"{url}: {reason}"
    if not isinstance(data, dict) or "workers" not in data:
        return None, f"{url}: not a Spark master's status page"
    return data, ""


def unchecked_capacity(ui: str, reason: str, placement_timeout: float) -> str:
    """The warning for a standalone master whose capacity could not be read: a job larger
    than the cluster then waits the placement timeout before it fails, instead of being
    refused at once, so the user is told at start and shown the field that fixes it."""
    return (f"the Spark capacity check could not run: the master's status page did not answer "
            f"({reason}); a job larger than the cluster waits spark.placement_timeout_seconds "
            f"({placement_timeout:g} s) and then fails. Set spark.master_ui to the master's web UI "
            f"(default {ui}) so that tfdist can check before it starts")


def default_ui(master: str) -> str:
    host = master_endpoints(master)[0][0]
    return f"http://{host}:8080"


def unreachable(master: str, timeout: float = 3.0) -> str | None:
    """Why no master answers at a ``spark://`` or ``k8s://`` URL (None when one does)."""
    if master.startswith("spark://"):
        targets = master_endpoints(master)
    else:
        url = urlparse(master[len("k8s://"):])
        targets = [(url.hostname or "", url.port or (443 if url.scheme == "https" else 80))]
    errors = []
    for host, port in targets:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return None
        except OSError as err:
            errors.append(f"{host}:{port}: {err.strerror or err}")
    return "; ".join(errors)


def task_cpus(cpus: list[float | None]) -> int:
    """``spark.task.cpus`` for the stage: one slot shape for every task (a barrier stage
    has one resource profile), the largest any role asks."""
    return max([1, *(math.ceil(c) for c in cpus if c)])


#: A workdir bigger than this is refused rather than packed (a run started from $HOME or
#: /tmp would pack everything under it): say spark.ship_workdir: false, or use a project dir.
MAX_WORKDIR_BYTES = 256 * 1024 * 1024
MAX_WORKDIR_FILES = 20000


def _shipped(workdir: Path, skip: list[Path]) -> Iterator[Path]:
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
    for count, path in enumerate(_shipped(workdir, skip), 1):
        with contextlib.suppress(OSError):
            size += path.lstat().st_size
        if size > MAX_WORKDIR_BYTES or count > MAX_WORKDIR_FILES:
            return (f"more than {MAX_WORKDIR_BYTES >> 20} MiB or {MAX_WORKDIR_FILES} files to ship "
                    f"(counting stopped at {count} files, {size >> 20} MiB)")
    return None


def pack_workdir(workdir: Path, dest: Path, skip: list[Path]) -> int:
    """Pack ``workdir`` into the ``.tar.gz`` ``dest`` (a format Spark unpacks keeping file
    modes, so ``command: [./run.sh]`` still runs); excluded names and ``skip`` paths are left
    out. Returns how many files went in."""
    root = workdir.resolve()
    count = 0
    with tarfile.open(dest, "w:gz") as tar:
        for path in _shipped(workdir, skip):
            if path.resolve() == dest.resolve():
                continue
            tar.add(path, path.relative_to(root).as_posix(), recursive=False)
            count += 1
    return count

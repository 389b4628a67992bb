"""Which GPUs this machine has, and which task gets which (one machine, many cards)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from tfdist.errors import SpecError


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """GPU ids tasks may use.

    ``TFDIST_GPUS`` (comma-separated ids) wins, so users can fence tfdist to some cards
    and tests can fake a device list; then the launcher's own ``CUDA_VISIBLE_DEVICES``;
    then what ``nvidia-smi`` lists; else none.
    """
    env = os.environ if environ is None else environ
    for key in ("TFDIST_GPUS", "CUDA_VISIBLE_DEVICES"):
        if key in env:
            return [g.strip() for g in env[key].split(",") if g.strip() and g.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def assign_gpus(
    wanted: Sequence[tuple[str, int]], available: Sequence[str]
) -> dict[str, list[str]]:
    """Give each task (name, count) its own cards, in order; refuse when there are too few."""
    total = sum(n for _, n in wanted)
    if total > len(available):
        asked = ", ".join(f"{name}: {n}" for name, n in wanted if n)
        raise SpecError(
            f"roles.*.resources.gpus: the job asks for {total} GPUs ({asked}) but "
            f"{len(available)} are visible; lower gpus or set TFDIST_GPUS"
        )
    result: dict[str, list[str]] = {}
    cursor = 0
    for name, n in wanted:
        result[name] = list(available[cursor : cursor + n])
        cursor += n
    return result

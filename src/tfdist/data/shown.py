"""A task's data as one line of text, the same in ``tfdist status``, the summary at the end of
a run and the dashboard's job page: which files of each input it got (a count, their bytes
and the first few names) and how long its inputs took to stage.

File names are the user's, or a directory listing's, so anything: a newline, a terminal
escape or markup in one is shown escaped (``\\n``, ``\\x1b``), never acted on, and a long one
is cut. What a staging report says is shown only when it is a number (a task can print the
report's line itself, with any value)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfdist.safe_text import one_line
from tfdist.states import bytes_text

#: A file name is shown up to this many characters.
MAX_NAME = 80


def file_name(uri: str) -> str:
    """The last component of ``uri`` (``hdfs://nn/clicks/part-0`` -> ``part-0``), as safe text."""
    name = str(uri).rstrip("/").rsplit("/", 1)[-1] or str(uri)
    name = one_line(name)
    return name if len(name) <= MAX_NAME else name[:MAX_NAME - 1] + "…"


def count(value: Any) -> int | None:
    """``value`` when it is a count (an int >= 0, not a bool), else None: what is shown comes
    from a run directory's file or a shared store, where anything may have been written."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _amount(value: Any) -> float | None:
    """``value`` when it is a number >= 0 (not a bool, not NaN), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def share_text(got: Mapping[str, Any]) -> str:
    """``4 files, 10.0 KB: part-0, part-1, part-2 and 1 more`` from one input's entry of a
    task in :func:`tfdist.data.plan.summary`."""
    files = count(got.get("files")) or 0
    first = [file_name(u) for u in got.get("first") or ()][:files]
    size = count(got.get("bytes"))
    text = f"{files:,} file{'' if files == 1 else 's'}"
    if size is not None:
        text += f", {bytes_text(float(size))}"
    if first:
        text += ": " + ", ".join(first) + (f" and {files - len(first):,} more" if files > len(first) else "")
    return text


def staging_text(staged: Mapping[str, Any] | None) -> str:
    """``staged in 1.25 s (copied 1 of 2 files, the rest from the cache)`` from a task's last
    ``stage`` report; empty without one (a task whose inputs are streamed, or not staged yet)."""
    if not isinstance(staged, Mapping):
        return ""
    seconds = _amount(staged.get("seconds"))
    if seconds is None:
        return ""
    files, copied = count(staged.get("files")), count(staged.get("copied"))
    text = f"staged in {seconds:.2f} s"
    if files is not None and copied is not None:
        text += f" (copied {copied} of {files} files{', the rest from the cache' if copied < files else ''})"
    return text


def task_line(task: str, inputs: Mapping[str, Mapping[str, Any]], staged: Mapping[str, Any] | None) -> str:
    """``worker-0: train 2 files, 3.0 KB: part-0, part-3; staged in 0.01 s (...)``."""
    parts = [f"{one_line(name)} {share_text(got)}" for name, got in inputs.items()]
    if staging := staging_text(staged):
        parts.append(staging)
    return f"{one_line(task)}: " + "; ".join(parts)


def goodput_text(goodput: Mapping[str, Any] | None) -> str:
    """``staging took 1.20 s of the job's 30.0 s (goodput's staging cause, 4%)`` from a job's
    goodput breakdown (tfdist.supervisor.goodput), where staging is its own cause; empty
    without one or without staging in it."""
    if not isinstance(goodput, Mapping) or not isinstance(goodput.get("seconds"), Mapping):
        return ""
    seconds, wall = _amount(goodput["seconds"].get("staging")), _amount(goodput.get("wall_seconds"))
    if not seconds:
        return ""
    if wall:
        return (f"staging took {seconds:.2f} s of the job's {wall:.1f} s "
                f"(goodput's staging cause, {100 * seconds / wall:.0f}%)")
    return f"staging took {seconds:.2f} s (goodput's staging cause)"

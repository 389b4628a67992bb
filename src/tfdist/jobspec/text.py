"""Exact text: values read from a job file that remember how they were written.

Command arguments and environment values reach a process as exact strings. :mod:`.yaml`
makes numbers :class:`YInt`/:class:`YFloat` so that ``--seed 0123`` reaches a task as
``0123``; :func:`exact_text` reads them back, and refuses in one line what has no faithful
text (booleans, null, lists, mappings: never stringified) and NUL bytes, which no argument,
variable, path or name can carry. Kept apart from the YAML reader so that a job built
without a file (the quick form, the Python API) never imports PyYAML.
"""

from __future__ import annotations

from typing import Any

from tfdist.errors import SpecError


class YInt(int):
    """An integer read from YAML that remembers how it was written (``0123``, ``0x1F``)."""

    source: str

    def __new__(cls, value: int, source: str) -> YInt:
        obj = super().__new__(cls, value)
        obj.source = source
        return obj


class YFloat(float):
    """A float read from YAML that remembers how it was written (``1e3``, ``.5``)."""

    source: str

    def __new__(cls, value: float, source: str) -> YFloat:
        obj = super().__new__(cls, value)
        obj.source = source
        return obj


def text_of(value: Any) -> str | None:
    """The exact text of a value that stands for text, or None when it cannot.

    Strings are themselves; numbers read from YAML are their source text; numbers given from
    Python are ``str()``-ed. Booleans, null, lists and mappings have no faithful text.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, YInt | YFloat):
        return value.source
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def why_not_text(value: Any) -> str:
    """The second half of a one-line refusal of a non-text value, with what to write."""
    if isinstance(value, bool):
        return f"{str(value).lower()} is read as a boolean by YAML; quote it (\"{str(value).lower()}\")"
    if value is None:
        return 'has no value (null); write "" for an empty string'
    if isinstance(value, list):
        return "is a list; it must be one string (quote it)"
    if isinstance(value, dict):
        return "is a mapping; it must be one string (quote it)"
    return f"is {type(value).__name__}, not text; quote it"


def plain(value: Any) -> Any:
    """``value`` with every YInt/YFloat made a plain int/float (for dumping and :mod:`.schema`)."""
    if isinstance(value, YInt):
        return int(value)
    if isinstance(value, YFloat):
        return float(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def exact_text(value: Any, where: str, source: str) -> str:
    """``value`` as the exact text the user wrote, or a one-line SpecError."""
    text = text_of(value)
    if text is None:
        raise SpecError(f"{source}: {where}: {why_not_text(value)}")
    if "\0" in text:
        raise SpecError(f"{source}: {where}: contains a NUL byte, which no process argument can carry")
    return text


def env_name(key: Any, where: str, source: str) -> str:
    """An environment variable's name as exact text: not empty, no ``=``."""
    name = exact_text(key, f"{where} (a name)", source)
    if not name or "=" in name:
        raise SpecError(
            f"{source}: {where}: {name!r} is no environment variable name (empty or with '='); "
            "write NAME: value"
        )
    return name

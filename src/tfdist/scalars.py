"""Values read from a job file that remember how they were written, and their text.

:mod:`tfdist.yamlload` makes numbers :class:`YInt`/:class:`YFloat` so that ``--seed 0123``
reaches a task as ``0123``; the job checks (:mod:`tfdist.jobinput`) read them back with
:func:`text_of`. Kept apart from the loader so that a job built without a file (the quick
form, the Python API) never imports PyYAML.
"""

from __future__ import annotations

from typing import Any


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
    """``value`` with every YInt/YFloat made a plain int/float (for dumping and tfdist.schema)."""
    if isinstance(value, YInt):
        return int(value)
    if isinstance(value, YFloat):
        return float(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value

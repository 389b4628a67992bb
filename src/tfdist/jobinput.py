"""Raw job input before it becomes a :class:`~tfdist.spec.JobSpec`: exact text, one-line errors.

Command arguments and environment values reach a process as exact strings, so this module
decides, before validation, what each of them is: text as typed (a YAML number keeps its
source text, see :mod:`tfdist.yamlload`) or a one-line refusal naming the field and saying
to quote it. Booleans, null, lists and mappings are refused, never stringified. NUL bytes
(anywhere: no argument, variable, path or name can carry one), empty environment names and
names with ``=`` are refused as well. Every other value is made a plain number for :mod:`tfdist.schema`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from tfdist.errors import SpecError
from tfdist.scalars import plain, text_of, why_not_text
from tfdist.schema import Invalid

Path_ = tuple[Any, ...]


def dotted(path: Path_) -> str:
    return ".".join(str(p) for p in path) or "top level"


def _text_kind(path: Path_) -> str | None:
    """'command', 'env' or 'args' when ``path`` is a place that holds exact text."""
    rest = path[2:] if path[:1] == ("roles",) and len(path) > 2 else path
    if rest[:1] == ("command",) and len(rest) == 2:
        return "command"
    if rest[:1] == ("env",) and len(rest) == 2:
        return "env"
    if rest[:2] == ("kubernetes", "args") and len(rest) == 3:
        return "args"
    return None


def exact_text(value: Any, where: str, source: str) -> str:
    """``value`` as the exact text the user wrote, or a one-line SpecError."""
    text = text_of(value)
    if text is None:
        raise SpecError(f"{source}: {where}: {why_not_text(value)}")
    if "\0" in text:
        raise SpecError(f"{source}: {where}: contains a NUL byte, which no process argument can carry")
    return text


def env_name(key: Any, where: str, source: str) -> str:
    name = exact_text(key, f"{where} (a name)", source)
    if not name or "=" in name:
        raise SpecError(
            f"{source}: {where}: {name!r} is no environment variable name (empty or with '='); "
            "write NAME: value"
        )
    return name


def normalize(data: Any, source: str, path: Path_ = ()) -> Any:
    """The raw job dict with text fields exact (see the module docstring) and numbers plain."""
    if _text_kind(path):
        return exact_text(data, dotted(path), source)
    if isinstance(data, dict):
        env = _text_kind((*path, "")) == "env"
        found = {}
        for key, value in data.items():
            if isinstance(key, str) and "\0" in key:
                raise SpecError(f"{source}: {dotted(path)}: a key contains a NUL byte")
            name = env_name(key, dotted((*path, key)), source) if env else plain(key)
            found[name] = normalize(value, source, (*path, name))
        return found
    if isinstance(data, list):
        return [normalize(v, source, (*path, i)) for i, v in enumerate(data)]
    if isinstance(data, str):
        if "\0" in data:
            raise SpecError(f"{source}: {dotted(path)}: contains a NUL byte; remove it")
        return data
    return plain(data)


# -- one-line validation errors --------------------------------------------------------------


def one_line(
    err: Invalid,
    source: str,
    roles: tuple[str, ...],
    rename: Callable[[str], str] | None = None,
) -> str:
    """A validation error as one line: source: path: what is wrong."""
    loc = err.path
    name = rename or (lambda p: p)
    path = name(".".join(str(p) for p in loc))
    if err.kind == "extra":
        key = str(loc[-1])
        choices = list(err.choices)
        import difflib  # only when there is a mistake to name

        close = difflib.get_close_matches(key, choices, n=1)
        where = name(".".join(str(p) for p in loc[:-1])) or "top level"
        hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(choices)}"
        return f"{source}: unknown key {key!r} in {where}{hint}"
    if err.kind == "key" and loc[:1] == ("roles",):
        return f"{source}: unknown role {str(loc[1])!r} in roles; roles are {', '.join(roles)}"
    msg = err.message
    if not loc and rename and re.match(r"[a-z_.]+: ", msg):  # "roles.chief.replicas: ..."
        field, _, rest = msg.partition(": ")
        msg = f"{name(field)}: {rest}"
    got = err.got
    shown = "" if isinstance(got, dict | list) or got is None else f" (got {repr(got)[:80]})"
    if err.kind == "str" and isinstance(got, int | float):
        shown += "; quote it to keep it as written"
    return f"{source}: {path + ': ' if path else ''}{msg}{shown}"


# -- the quick form's name -------------------------------------------------------------------

_INTERPRETERS = {"python", "python3", "bash", "sh", "env", "uv", "torchrun", "time", "nice", "exec"}


def default_name(command: list[str]) -> str:
    """A job name that says what runs: ``train-3f9a`` for ``python train.py`` (not ``job``).

    The script's (or program's) stem, lower-cased to ``[a-z0-9-]``, at most 24 characters,
    starting with a letter (Kubernetes Service names must), plus 4 random hex digits so two
    quick jobs of one script are told apart.
    """
    words = [w for w in command if w and not w.startswith("-") and "=" not in w]
    stems = [PurePath(w).stem.lower() for w in words]
    useful = [s for s in stems if re.sub(r"[0-9.]", "", s) not in _INTERPRETERS] or stems
    stem = re.sub(r"[^a-z0-9]+", "-", useful[0] if useful else "").strip("-")[:24].strip("-")
    if not stem or not stem[0].isalpha():
        stem = f"job-{stem}".strip("-")[:24].strip("-")
    return f"{stem}-{os.urandom(2).hex()}"

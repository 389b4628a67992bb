"""A job from its input, in one pass: a file, ``--set`` settings or the quick form -> JobSpec.

The flow, top to bottom: read the file (:func:`.yaml.read_text`) and parse it by YAML 1.2
(:func:`.yaml.parse`, numbers keeping their source text); a Kubeflow TFJob is translated to
tfdist's keys (:func:`.tfjob.to_job_dict`); ``--set`` settings are applied to the raw dict
(:func:`apply_overrides`); :func:`normalize` runs once, making command arguments and
environment values exact text and every other number plain; the records of
:mod:`.model` check the result, and a failure becomes one line naming the field
(in the TFJob's own field names when the job came as one).

Nothing here imports PyYAML unless a job comes as text (a file or a ``--set`` value).
"""

from __future__ import annotations

import errno
import os
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

from tfdist.contract import ROLES
from tfdist.errors import SpecError
from tfdist.jobspec.model import JobSpec
from tfdist.jobspec.schema import Invalid, Record, field_types
from tfdist.jobspec.text import YFloat, YInt, env_name, exact_text, plain

Path_ = tuple[Any, ...]


# -- the three inputs ------------------------------------------------------------------------


def from_file(
    path: str | Path, overrides: list[str] | None = None, notes: list[str] | None = None
) -> JobSpec:
    """Read a job file (tfdist YAML or a Kubeflow TFJob), apply ``--set`` overrides.

    ``workdir`` is resolved relative to the file, so a job runs the same from any cwd.
    ``notes`` collects warnings for a local run (volumes a TFJob mounts).
    """
    from tfdist.jobspec import yaml  # PyYAML: only for a job that comes as text

    path = Path(path)
    return from_text(yaml.read_text(path), str(path), path.parent, overrides, notes)


def from_text(text: str, source: str, base: Path, overrides: list[str] | None = None,
              notes: list[str] | None = None) -> JobSpec:
    """A job file's text (read by the caller: e.g. a stored run's ``job.yaml`` through the
    dashboard's no-link reader), as :func:`from_file` reads it; ``workdir`` is relative
    to ``base``."""
    from tfdist.jobspec import yaml

    data = yaml.parse(text, source)
    rename = None
    if isinstance(data, dict) and data.get("kind") == "TFJob":
        from tfdist.jobspec import tfjob

        raw, data = data, tfjob.to_job_dict(data, source)
        if notes is not None:
            notes.extend(tfjob.local_notes(raw, source))
        if not overrides:
            rename = tfjob.field_namer(raw)
    data = normalize(apply_overrides(_mapping(data, source), overrides or [], source), source)
    _resolve_workdir(data, base, source)
    return _build(data, source, rename)


def from_dict(
    data: Any, source: str = "job", rename: Callable[[str], str] | None = None
) -> JobSpec:
    """Validate a plain dict into a :class:`JobSpec` or raise a one-line SpecError.

    ``rename`` maps tfdist field paths to the names the user wrote (a TFJob's fields).
    """
    return _build(normalize(_mapping(data, source), source), source, rename)


def quick(
    command: list[str],
    *,
    name: str | None = None,
    chief: bool = False,
    workers: int = 0,
    ps: int = 0,
    evaluator: bool = False,
    strategy: str | None = None,
    env: list[str] | None = None,
    workdir: str = ".",
    overrides: list[str] | None = None,
) -> JobSpec:
    """The spec of the quick form ``tfdist run --workers 2 -- python train.py``.

    Without ``name`` the job is named after its command (``train-3f9a``), never just ``job``.
    ``overrides`` (``--set``) apply to the job the other arguments describe.
    """
    if not command:
        raise SpecError("command: give the command to run after '--', e.g. -- python train.py")
    if not chief and not workers:
        workers = 1
    counts = _role_counts(chief, workers, ps, evaluator)
    data = {
        "name": _default_name(command) if name is None else name,
        "strategy": ("parameter_server" if ps else "multi_worker_mirrored") if strategy is None else strategy,
        "command": command,
        "workdir": workdir,
        "env": dict(_env_pairs(env)),
        "roles": counts,
    }
    source = "command line"
    data = normalize(apply_overrides(data, overrides or [], source), source)
    _resolve_workdir(data, Path("."), source)
    return _build(data, source)


def quick_settings(
    *,
    name: str | None = None,
    chief: bool = False,
    workers: int = 0,
    ps: int = 0,
    evaluator: bool = False,
    strategy: str | None = None,
    env: list[str] | None = None,
) -> list[str]:
    """The quick form's flags given with a job file, as the ``--set`` settings they mean
    (``--workers 5`` is ``roles.worker.replicas=5``), so ``tfdist run job.yaml --name x``
    runs what it says instead of the file as it is. Values are quoted: ``--name`` is the
    name, never YAML."""
    import json

    settings = [] if name is None else [f"name={json.dumps(name)}"]
    if strategy is not None:
        settings.append(f"strategy={json.dumps(strategy)}")
    for flag, n in (("--workers", workers), ("--ps", ps)):
        if n < 0:
            raise SpecError(f"{flag} {n}: give a number of tasks, 0 or more")
    counts = _role_counts(chief, workers, ps, evaluator)
    settings += [f"roles.{role}.replicas={n}" for role, n in counts.items()]
    settings += [f"env.{key}={json.dumps(value)}" for key, value in _env_pairs(env)]
    return settings


def _role_counts(chief: bool, workers: int, ps: int, evaluator: bool) -> dict[str, int]:
    """The quick form's roles that have tasks, in the job file's order."""
    counts = {"chief": int(chief), "worker": workers, "ps": ps, "evaluator": int(evaluator)}
    return {role: n for role, n in counts.items() if n}


def _env_pairs(env: list[str] | None) -> list[tuple[str, str]]:
    """``--env NAME=VALUE`` flags as pairs (one line, exit 2, for one without a name)."""
    pairs = []
    for item in env or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--env {item[:80]!r}: write NAME=VALUE")
        pairs.append((key, value))
    return pairs


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """Apply ``KEY=VALUE`` settings (dotted keys, YAML values) to a raw job dict.

    Values are read like the job file: ``--set env.ID=010`` gives the text ``010``.
    """
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.split(".")
        if not sep or not all(parts):
            raise SpecError(f"--set {item[:80]!r}: write KEY=VALUE, e.g. roles.worker.replicas=3")
        parts = key_path(parts)
        from tfdist.jobspec import yaml  # a --set setting is YAML text

        if len(parts) > yaml.MAX_DEPTH:  # as deep as a job file may nest
            raise SpecError(f"--set {item[:80]!r}: the key has more than {yaml.MAX_DEPTH} parts; a job "
                            "file's keys are a few levels deep, e.g. roles.worker.replicas")
        value = yaml.parse(raw, f"--set {key}") if raw else ""
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if isinstance(child, int) and part in ROLES:  # role shorthand
                child = {"replicas": child}
            child = dict(child) if isinstance(child, dict) else {}  # never edit a shared alias
            node[part] = child
            node = child
        node[parts[-1]] = value
    return data


def key_path(parts: list[str], kind: Any = JobSpec) -> list[str]:
    """The path a dotted ``--set`` key names: split at every dot until it reaches a free-form
    map (``env``, ``spark.conf``, ``kubernetes.labels``: a ``dict`` of plain values), whose
    own keys may hold dots themselves, so the rest is one key: ``spark.conf.spark.yarn.queue``
    is ``spark`` / ``conf`` / ``spark.yarn.queue``, not a nested mapping Spark never reads."""
    for depth, part in enumerate(parts):
        record = _record_of(kind)
        if record is None:
            return parts  # a list or a scalar: the model's checks name what is wrong
        fields = field_types(record)
        if part not in fields:
            return parts  # an unknown key: refused with a did-you-mean when built
        kind, rest = fields[part], parts[depth + 1:]
        if typing.get_origin(kind) is dict and len(rest) > 1:
            item = typing.get_args(kind)[1]
            if _record_of(item) is None:  # free-form: the rest is one literal key
                return [*parts[:depth + 1], ".".join(rest)]
            return [*parts[:depth + 2], *key_path(rest[1:], item)]  # roles.worker, then its fields
    return parts


def _record_of(kind: Any) -> type[Record] | None:
    """The record class of a field type (``X`` or ``X | None``), or None."""
    options = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
    for option in options:
        if isinstance(option, type) and issubclass(option, Record):
            return option
    return None


def _resolve_workdir(data: dict[str, Any], base: Path, source: str) -> None:
    """A relative ``workdir`` made absolute (relative to ``base``), so a job runs the same
    from any cwd. A path the system cannot even look up (a name over NAME_MAX, the whole over
    PATH_MAX, a loop of symbolic links) is refused here, naming the field; whether it is a
    directory is each backend's check (a Kubernetes job never uses it)."""
    workdir = data.get("workdir", ".")
    if not isinstance(workdir, str):
        return  # the model names the wrong type
    try:
        path = Path(workdir) if Path(workdir).is_absolute() else (base / workdir).resolve()
    except RuntimeError:  # a loop of symbolic links (Python < 3.13)
        raise _no_path(workdir, os.strerror(errno.ELOOP), source) from None
    except OSError as err:  # e.g. the cwd was removed
        raise _no_path(workdir, err.strerror or str(err), source) from None
    try:
        os.stat(path)
    except OSError as err:  # missing or no directory: the backend says so if it needs one
        if err.errno in (errno.ENAMETOOLONG, errno.ELOOP):
            raise _no_path(workdir, err.strerror or str(err), source) from None
    data["workdir"] = str(path)


def _no_path(workdir: str, reason: str, source: str) -> SpecError:
    return SpecError(f"{source}: workdir: {workdir[:80]!r} is no usable path ({reason}); give the path "
                     "of a directory")


def _mapping(data: Any, source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        got = plain(data) if isinstance(data, YInt | YFloat) else data  # the reader's int and float
        raise SpecError(
            f"{source}: a job file must be a mapping of keys, got {type(got).__name__}"
        )
    return data


def _build(data: dict[str, Any], source: str, rename: Callable[[str], str] | None = None) -> JobSpec:
    """The checked job of a normalized dict, or a one-line SpecError."""
    try:
        return JobSpec.build(data)
    except Invalid as err:
        raise SpecError(_one_line(err, source, rename)) from None
    except (ValueError, RecursionError) as err:  # e.g. a string shlex cannot split
        raise SpecError(f"{source}: {str(err).splitlines()[0][:200]}") from None


# -- exact text, once ------------------------------------------------------------------------


def _dotted(path: Path_) -> str:
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


def normalize(data: Any, source: str, path: Path_ = ()) -> Any:
    """The raw job dict with text fields exact (see :mod:`.text`) and numbers plain.

    NUL bytes are refused anywhere, and so are empty environment names and names with ``=``.
    """
    if _text_kind(path):
        return exact_text(data, _dotted(path), source)
    if isinstance(data, dict):
        env = _text_kind((*path, "")) == "env"
        found = {}
        for key, value in data.items():
            if isinstance(key, str) and "\0" in key:
                raise SpecError(f"{source}: {_dotted(path)}: a key contains a NUL byte")
            name = env_name(key, _dotted((*path, key)), source) if env else plain(key)
            found[name] = normalize(value, source, (*path, name))
        return found
    if isinstance(data, list):
        return [normalize(v, source, (*path, i)) for i, v in enumerate(data)]
    if isinstance(data, str):
        if "\0" in data:
            raise SpecError(f"{source}: {_dotted(path)}: contains a NUL byte; remove it")
        return data
    return plain(data)


# -- one-line validation errors --------------------------------------------------------------


def _one_line(err: Invalid, source: str, rename: Callable[[str], str] | None) -> str:
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
        return f"{source}: unknown role {str(loc[1])!r} in roles; roles are {', '.join(ROLES)}"
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


def _default_name(command: list[str]) -> str:
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

"""Frozen dataclasses that check and convert their fields when built: the job spec's validator.

Why not pydantic: importing it and building the spec's models cost ~80 ms of every
``tfdist run`` (a third of launching four no-op tasks), and its machinery is far larger than
what a job file needs. This module covers exactly what :mod:`.model` uses, with the
standard library alone:

- field types ``bool``, ``int`` (never a bool or a float), ``float`` (finite; an int is
  converted), ``str``, ``Any``, ``X | None``, ``Literal[...]``, ``list[X]``, ``dict[K, V]``
  and nested :class:`Record` classes (a mapping is built into one, unknown keys refused);
- per-field :func:`rules`: bounds (``ge``/``gt``/``le``), string lengths, and a ``before``
  hook that reshapes raw input (a command string split, a role count as a mapping);
- :meth:`Record.check` for rules across fields, run after every field is valid.

A record is valid from the moment it exists: the checks run in ``__post_init__``, so
``RoleSpec(replicas=-1)`` and ``dataclasses.replace(job, ...)`` raise :class:`Invalid` like
a bad job file does. Messages keep pydantic's wording ("Input should be ..."), which users
and the error tests already know; :mod:`.load` turns one into a line naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, Union

R = TypeVar("R", bound="Record")

_NONE = type(None)


class Invalid(ValueError):
    """One invalid value: where (a field path), what is wrong, and the value given.

    ``kind`` tells :mod:`.load` how to phrase it: ``extra`` (an unknown
    key; ``choices`` are the known ones), ``key`` (a mapping key outside its choices),
    ``str`` (text expected, so a number should be quoted), or empty.
    """

    def __init__(
        self,
        message: str,
        path: tuple[str | int, ...] = (),
        got: Any = None,
        kind: str = "",
        choices: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message, self.path, self.got, self.kind, self.choices = message, path, got, kind, choices

    def under(self, *prefix: str | int) -> Invalid:
        """The same error seen from an enclosing record or container."""
        return Invalid(self.message, (*prefix, *self.path), self.got, self.kind, self.choices)


def rules(
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    before: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """A field's checks, for ``dataclasses.field(metadata=rules(...))``."""
    given = {"ge": ge, "gt": gt, "le": le, "min_length": min_length, "max_length": max_length,
             "before": before}
    return {name: value for name, value in given.items() if value is not None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """Base of the spec's records: every field is checked (and converted) on construction."""

    def __post_init__(self) -> None:
        for name, kind, meta in _plan(type(self)):
            value = getattr(self, name)
            try:
                checked = _check(kind, value, meta)
            except Invalid as err:
                raise err.under(name) from None
            if checked is not value:
                object.__setattr__(self, name, checked)  # frozen: only while being built
        try:
            self.check()
        except Invalid:
            raise
        except ValueError as err:
            raise Invalid(str(err)) from None

    def check(self) -> None:
        """Rules across fields, run once every field is valid; raise ValueError."""

    @classmethod
    def build(cls: type[R], data: Any) -> R:
        """A record from a mapping of raw values (or the record itself)."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise Invalid(f"Input should be a mapping of {cls.__name__} fields", got=data)
        plan = _plan(cls)
        names = tuple(name for name, _, _ in plan)
        for key in data:
            if key not in names:
                raise Invalid("unknown key", (str(key),), kind="extra", choices=names)
        for name in _required(cls):
            if name not in data:
                raise Invalid("Field required", (name,))
        return cls(**data)

    def dump(self, *, exclude_defaults: bool = False) -> dict[str, Any]:
        """Plain values (JSON-ready); with ``exclude_defaults`` only what differs from them."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if exclude_defaults and _has_default(field) and value == _default(field):
                continue
            out[field.name] = _plain(value, exclude_defaults)
        return out


# -- one field ---------------------------------------------------------------------------------


def _plan(cls: type[Record]) -> list[tuple[str, Any, Mapping[str, Any]]]:
    """Each field's name, resolved type and rules, computed once per class."""
    cached = cls.__dict__.get("_tfdist_plan")
    if cached is None:
        fields = dataclasses.fields(cls)
        # a module without ``from __future__ import annotations`` (:mod:`.model`) gives the types
        # themselves; resolving ~100 string annotations cost ~8 ms of a launch
        hints = typing.get_type_hints(cls) if any(isinstance(f.type, str) for f in fields) else {}
        cached = [(f.name, hints.get(f.name, f.type), f.metadata) for f in fields]
        setattr(cls, "_tfdist_plan", cached)  # noqa: B010 - a class attribute, not a field
    return cached


def field_types(cls: type[Record]) -> dict[str, Any]:
    """Each field's resolved type, by name (for walking the model, e.g. a dotted ``--set`` key)."""
    return {name: kind for name, kind, _ in _plan(cls)}


def _required(cls: type[Record]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if not _has_default(f)]


def _has_default(field: dataclasses.Field[Any]) -> bool:
    return field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _plain(value: Any, exclude_defaults: bool) -> Any:
    if isinstance(value, Record):
        return value.dump(exclude_defaults=exclude_defaults)
    if isinstance(value, list):
        return [_plain(v, exclude_defaults) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, exclude_defaults) for k, v in value.items()}
    return value


def _check(kind: Any, value: Any, meta: Mapping[str, Any]) -> Any:
    before = meta.get("before")
    if before is not None:
        try:
            value = before(value)
        except Invalid:
            raise
        except ValueError as err:
            raise Invalid(str(err), got=value) from None
    value = convert(kind, value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        for rule, ok, words in (
            ("ge", lambda v, b: v >= b, "greater than or equal to"),
            ("gt", lambda v, b: v > b, "greater than"),
            ("le", lambda v, b: v <= b, "less than or equal to"),
        ):
            bound = meta.get(rule)
            if bound is not None and not ok(value, bound):
                raise Invalid(f"Input should be {words} {bound}", got=value)
    if isinstance(value, str):
        low, high = meta.get("min_length"), meta.get("max_length")
        if low is not None and len(value) < low:
            raise Invalid(f"String should have at least {low} character{'s' * (low != 1)}", got=value)
        if high is not None and len(value) > high:
            raise Invalid(f"String should have at most {high} characters", got=value)
    return value


def convert(kind: Any, value: Any) -> Any:
    """``value`` as type ``kind`` (see the module docstring), or :class:`Invalid`."""
    if kind is Any:
        return value
    origin = typing.get_origin(kind)
    if origin is Union or origin is types.UnionType:
        return _union(typing.get_args(kind), value)
    if origin is Literal:
        for choice in typing.get_args(kind):
            if value == choice and type(value) is type(choice):
                return choice
        raise Invalid(f"Input should be {_either(typing.get_args(kind))}", got=value)
    if origin is list:
        if not isinstance(value, list | tuple):
            raise Invalid("Input should be a valid list", got=value)
        (item,) = typing.get_args(kind)
        return [_at(i, item, v) for i, v in enumerate(value)]
    if origin is dict:
        key_kind, item = typing.get_args(kind)
        return _mapping(key_kind, item, value)
    if kind in _SCALARS:
        return _SCALARS[kind](value)
    if isinstance(kind, type) and issubclass(kind, Record):
        return kind.build(value)
    raise TypeError(f"tfdist.jobspec.schema: no check for fields of type {kind!r}")


def _union(options: tuple[Any, ...], value: Any) -> Any:
    """The first option ``value`` converts to (None first when allowed), else the last's error."""
    if value is None and _NONE in options:
        return None
    rest = [k for k in options if k is not _NONE]
    for option in rest[:-1]:
        try:
            return convert(option, value)
        except Invalid:
            pass
    return convert(rest[-1], value)


def _mapping(key_kind: Any, item: Any, value: Any) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise Invalid("Input should be a valid dictionary", got=value)
    out = {}
    for key, v in value.items():
        try:
            key = convert(key_kind, key)
        except Invalid as err:
            raise Invalid(err.message, (str(key),), key, kind="key") from None
        out[key] = _at(key, item, v)
    return out


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise Invalid("Input should be a valid boolean", got=value)


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise Invalid("Input should be a valid integer", got=value)


def _float(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise Invalid("Input should be a valid number", got=value)
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid("Input should be a finite number", got=value)
    return float(value)


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise Invalid("Input should be a valid string", got=value, kind="str")


_SCALARS: dict[Any, Callable[[Any], Any]] = {bool: _bool, int: _int, float: _float, str: _str}


def _at(key: str | int, kind: Any, value: Any) -> Any:
    try:
        return convert(kind, value)
    except Invalid as err:
        raise err.under(key) from None


def _either(choices: tuple[Any, ...]) -> str:
    shown = [repr(c) for c in choices]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"

"""Read a job file's YAML without rewriting what the user typed, and without being hurt by it.

Why a loader of our own: PyYAML's ``safe_load`` follows YAML 1.1, where ``0123`` is 83,
``yes``/``off`` are booleans, ``0x1F`` is 31 and ``2024-01-01`` a date, so
``command: [python, train.py, --seed, 0123]`` reached a task as ``--seed 83``. This loader
resolves plain scalars by the YAML 1.2 core schema (only ``true``/``false`` are booleans,
only ``null``/``~``/empty is null, no dates) and keeps the source text of every number:
numbers are :class:`YInt`/:class:`YFloat`, which behave as ``int``/``float`` where a number
is wanted (``replicas: 2``) and give back exactly what was written where text is wanted
(:mod:`.text`, for command arguments and environment values).

It also refuses, with one line each and before any large allocation, what a hostile or
broken file can do to a parser: files over :data:`MAX_BYTES`, directories, FIFOs and
devices (checked with ``stat`` and opened non-blocking, so nothing blocks), binary or
non-UTF-8 bytes, duplicate keys, alias bombs (the node count after expanding aliases is
bounded by :data:`MAX_NODES`), circular aliases and nesting deeper than :data:`MAX_DEPTH`.
libyaml (when PyYAML has it) scans and parses: a 1 MiB file is read in well under a second,
where the pure-Python one took 26 s for one of 262k small values; nodes are composed
here, counted as they are made, so a huge document stops at the limit instead of the end.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from tfdist.errors import SpecError
from tfdist.jobspec.text import YFloat, YInt
from tfdist.regular_file import NotRegularFile, read_head

#: Largest job file read (a real one is a few KiB; a TFJob with many roles a few tens).
MAX_BYTES = 1 << 20
#: Most values in one document after aliases are expanded (a billion-laughs file has 10^9).
MAX_NODES = 20_000
#: Deepest nesting of lists and mappings (a job file needs about 8).
MAX_DEPTH = 64


# -- the loader ------------------------------------------------------------------------

_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class _Refused(Exception):
    """A document the loader will not build; ``mark`` says where."""

    def __init__(self, message: str, mark: Any = None) -> None:
        super().__init__(message)
        self.mark = mark


class _Schema(SafeConstructor, Resolver):
    """The YAML 1.2 core schema, numbers that keep their source text, no duplicate keys."""

    yaml_implicit_resolvers: dict[Any, Any] = {}

    def construct_yaml_int(self, node: ScalarNode) -> Any:  # type: ignore[override]
        text = str(self.construct_scalar(node))
        body = text.lstrip("+-")
        sign = -1 if text.startswith("-") else 1
        try:
            base = {"0o": 8, "0x": 16}.get(body[:2], 10)
            value = int(body[2:] if base != 10 else body, base)
            str(value)  # hex or octal: Python converts any size, but cannot print one past its digit limit
        except ValueError:  # more digits than Python converts, or a bad explicit !!int
            shown = text[:20] + "..." * (len(text) > 20)
            raise _Refused(f"{shown!r} is not a whole number tfdist reads", node.start_mark) from None
        return YInt(sign * value, text)

    def construct_yaml_float(self, node: ScalarNode) -> Any:  # type: ignore[override]
        text = str(self.construct_scalar(node))
        lowered = text.lower()
        try:
            value = float(lowered.replace(".inf", "inf").replace(".nan", "nan"))
        except ValueError:
            raise _Refused(f"{text[:40]!r} is not a number YAML can read", node.start_mark) from None
        return YFloat(value, text)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, ScalarNode):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _Refused(
                    f"duplicate key '{key}' (first on line {seen[key]}); keep one", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep)


class _Composer(Composer):
    """PyYAML's composer, counting nodes: a huge document stops at MAX_NODES, not at the end."""

    _nodes = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:  # type: ignore[override]
        self._nodes += 1
        if self._nodes > MAX_NODES:
            mark = self.peek_event().start_mark  # type: ignore[attr-defined]
            raise _Refused(f"more than {MAX_NODES:,} values; a job file needs far fewer", mark)
        return super().compose_node(parent, index)  # type: ignore[no-any-return]


_CParser: Any = getattr(yaml, "_yaml", None) and yaml._yaml.CParser  # None without libyaml

if _CParser is not None:  # libyaml scans and parses (fast, not recursive); we compose

    class _Loader(_Composer, _CParser, _Schema):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _Composer.__init__(self)
            _Schema.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML without libyaml

    class _Loader(Reader, Scanner, Parser, _Composer, _Schema):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            _Composer.__init__(self)
            _Schema.__init__(self)
            Resolver.__init__(self)


_Schema.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_Schema.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Schema.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
_Schema.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+.0123456789"))
_Schema.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])
_Schema.add_constructor("tag:yaml.org,2002:int", _Schema.construct_yaml_int)  # type: ignore[type-var]
_Schema.add_constructor("tag:yaml.org,2002:float", _Schema.construct_yaml_float)  # type: ignore[type-var]


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, also quoting every string this reader takes as a number (``1e3``,
    ``0o17``: numbers by YAML 1.2, not by the 1.1 rules PyYAML dumps with), so a dump reads
    back as it was (a submitted job's detached run reads its job.yaml)."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+.0123456789"))


def dump(data: Any) -> str:
    """``data`` as YAML text that :func:`parse` reads back to the same values."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def _check_graph(root: Node) -> None:
    """Refuse circular aliases, deep nesting and more than MAX_NODES values once expanded.

    Sizes are memoised per node, so a billion-laughs document costs one visit per anchor.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _Refused("circular alias: an anchor is used inside itself", node.start_mark)
        if depth > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", node.start_mark)
        total = 1
        if isinstance(node, SequenceNode | MappingNode):
            active.add(key)
            children: list[Node] = (
                list(node.value)
                if isinstance(node, SequenceNode)
                else [n for pair in node.value for n in pair]
            )
            for child in children:
                total += size(child, depth + 1)
                if total > MAX_NODES:
                    raise _Refused(
                        f"more than {MAX_NODES:,} values once aliases are expanded "
                        "(an alias bomb?); a job file needs far fewer",
                        node.start_mark,
                    )
            active.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


def parse(text: str, source: str) -> Any:
    """YAML text to Python values (see the module docstring); SpecError naming the line."""
    loader = None
    try:
        loader = _Loader(text)  # the reader refuses control characters here already
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return loader.construct_document(node)
    except _Refused as err:
        raise SpecError(f"{source}:{_where(err.mark)} {err}") from None
    except RecursionError:
        raise SpecError(f"{source}: nested more than {MAX_DEPTH} levels deep") from None
    except UnicodeEncodeError as err:  # a --set value's byte that is not UTF-8 (surrogateescape)
        byte = ord(text[err.start]) - 0xDC00
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else f"character U+{ord(text[err.start]):04X}"
        offset = len(text[:err.start].encode("utf-8", "surrogateescape"))  # in bytes, as for a file
        raise SpecError(f"{source}: not UTF-8 text ({shown} at offset {offset}); give UTF-8 text") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(f"{source}:{_where(mark)} malformed YAML: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _where(mark: Any) -> str:
    return f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""


def read_text(path: str | Path) -> str:
    """A job file's text, refusing what is not a small UTF-8 text file (never blocking)."""
    name = str(path)
    try:
        _check_kind(name, os.stat(path))  # a directory, a FIFO, too large: said as such
        data = read_head(path, MAX_BYTES)  # checked again on the open file: it may have been swapped
    except NotRegularFile:
        raise SpecError(f"{name}: not a regular file (a FIFO, device or socket); "
                        "give a YAML job file") from None
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise SpecError(f"{name}: cannot read the job file ({reason})") from None
    if len(data) > MAX_BYTES:
        raise SpecError(f"{name}: the job file is larger than {MAX_BYTES // 1024} KiB; give a job file")
    if b"\0" in data:
        raise SpecError(f"{name}: the file has NUL bytes: it is binary, not a YAML job file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(
            f"{name}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); "
            "a job file is YAML text"
        ) from None


def _check_kind(name: str, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise SpecError(f"{name}: is a directory; give the job file (YAML) inside it")
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(f"{name}: not a regular file (a FIFO, device or socket); give a YAML job file")
    if info.st_size > MAX_BYTES:
        raise SpecError(
            f"{name}: the job file is {info.st_size:,} bytes; at most {MAX_BYTES // 1024} KiB is read"
        )

"""Where a job's data lives, by URI scheme: one small interface the driver lists and globs
through and the node side reads and writes through.

A URI without a scheme (``/shared/vocab.txt``) or with ``file://`` is a path on the machine
that uses it (on a cluster: a shared file system every node mounts); ``hdfs://`` goes to HDFS
over WebHDFS (:mod:`tfdist.node.webhdfs`). Anything else is refused by name: the job
file's check refuses schemes no store handles (:data:`SCHEMES`), and :func:`store_for`
refuses a scheme whose client is missing on this node.

Standard library only: this runs inside Spark executors and YARN containers.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from tfdist import contract
from tfdist.node import webhdfs

#: The schemes a store below handles (the job spec refuses any other).
SCHEMES = contract.DATA_SCHEMES
#: Characters that make a path component a glob pattern.
GLOB_CHARS = "*?["


class StoreError(OSError):
    """A store cannot be reached or refused an operation; the message is one line."""


@dataclass(frozen=True)
class Entry:
    """One name in a directory listing: its full path (no scheme), size and kind."""

    path: str
    size: int
    is_dir: bool


class Store(Protocol):
    """What tfdist does with a store; every path is the URI's path part (``/a/b``)."""

    def stat(self, path: str) -> Entry | None: ...

    def listdir(self, path: str) -> list[Entry]: ...

    def get(self, path: str, local: str) -> int:
        """Copy ``path`` to the local file ``local``, replacing it whole; the bytes copied."""

    def put(self, local: str, path: str) -> None:
        """Copy a local file to ``path``, replacing it whole (readers never see half); its
        parent directories are made as needed."""

    def delete(self, path: str) -> None: ...

    def makedirs(self, path: str) -> None: ...


def scheme_of(uri: str) -> str:
    """The URI's scheme, lower-case; "" for a plain path."""
    if "://" not in uri:
        return ""
    return uri.split("://", 1)[0].lower()


def split(uri: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)``; a plain path is ``("", "", path)``."""
    scheme = scheme_of(uri)
    if not scheme:
        return "", "", uri
    parts = urlsplit(uri)
    return scheme, parts.netloc, parts.path or "/"


def join(scheme: str, authority: str, path: str) -> str:
    """The URI of ``path`` on the store ``split`` gave ``scheme`` and ``authority`` for."""
    return f"{scheme}://{authority}{path}" if scheme else path


class LocalStore:
    """This machine's file system (or a shared one mounted on every node)."""

    def stat(self, path: str) -> Entry | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise StoreError(f"{path}: {err.strerror or err}") from None
        return Entry(path, st.st_size, os.path.isdir(path))

    def listdir(self, path: str) -> list[Entry]:
        try:
            with os.scandir(path) as it:
                found = [Entry(e.path, e.stat().st_size, e.is_dir()) for e in it]
        except OSError as err:
            raise StoreError(f"{path}: {err.strerror or err}") from None
        return sorted(found, key=lambda e: e.path)

    def get(self, path: str, local: str) -> int:
        return self._copy(path, local)

    def put(self, local: str, path: str) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._copy(local, path)

    @staticmethod
    def _copy(src: str, dst: str) -> int:
        tmp = f"{dst}.tfdist-tmp"
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        return os.path.getsize(dst)

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)


def store_for(uri: str, routes: Mapping[str, Mapping[str, str]] | None = None) -> Store:
    """The store that handles ``uri``; StoreError for a scheme no client here handles.

    ``routes`` (from :func:`route`, made where tfdist runs) says how to reach a store: a node
    reaches the NameNode at the WebHDFS address, and as the user, that tfdist used to list
    the files, not at what its own environment would give (a YARN container has neither
    ``TFDIST_WEBHDFS`` nor, unless the NodeManager passes it on, ``HADOOP_CONF_DIR``)."""
    scheme, authority, _ = split(uri)
    if scheme in ("", "file"):
        return LocalStore()
    if scheme == "hdfs":
        known = (routes or {}).get(f"hdfs://{authority}")
        try:
            if known:
                return HdfsStore(webhdfs.WebHdfs(str(known["http"]), str(known.get("user") or "") or None,
                                                 namenode=authority))
            return HdfsStore(webhdfs.connect(f"hdfs://{authority}/")[0])
        except (webhdfs.WebHdfsError, ValueError, KeyError) as err:
            raise StoreError(str(err)) from None
    raise StoreError(f"{uri[:120]}: no store handles the scheme {scheme!r}; use a path or hdfs://")


def route(uri: str) -> tuple[str, dict[str, str]] | None:
    """``(store key, how to reach it)`` for :func:`store_for`'s ``routes``: for ``hdfs://``
    the WebHDFS address and user this machine resolves; None for a path (nothing to route).
    Raises StoreError when the address cannot be told."""
    scheme, authority, _ = split(uri)
    if scheme != "hdfs":
        return None
    try:
        client = webhdfs.connect(f"hdfs://{authority}/")[0]
    except (webhdfs.WebHdfsError, ValueError) as err:
        raise StoreError(str(err)) from None
    return f"hdfs://{authority}", {"http": client.address, "user": client.user}


class HdfsStore:
    """HDFS through :mod:`tfdist.node.webhdfs`; its errors become StoreError (one line)."""

    def __init__(self, client: webhdfs.WebHdfs) -> None:
        self.client = client

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except webhdfs.WebHdfsError as err:
            raise StoreError(str(err)) from None

    def stat(self, path: str) -> Entry | None:
        with self._errors():
            got = self.client.status(path)
        return None if got is None else Entry(got.path, got.size, got.is_dir)

    def listdir(self, path: str) -> list[Entry]:
        with self._errors():
            return [Entry(e.path, e.size, e.is_dir) for e in self.client.listdir(path)]

    def get(self, path: str, local: str) -> int:
        with self._errors():
            return self.client.download(path, local)

    def put(self, local: str, path: str) -> None:
        with self._errors():
            self.client.upload(local, path)

    def delete(self, path: str) -> None:
        with self._errors():
            self.client.delete(path)

    def makedirs(self, path: str) -> None:
        with self._errors():
            self.client.mkdirs(path)


def has_glob(path: str) -> bool:
    return any(c in path for c in GLOB_CHARS)


def expand(store: Store, path: str) -> list[Entry]:
    """The files ``path`` names: itself (a file), every file under it (a directory, walked),
    or those a glob matches (``*?[`` in any component; a matched directory is walked too).
    Sorted by path; hidden names (``.x``, ``_x``: Hadoop's ``_SUCCESS``) under a walked
    directory are left out."""
    if not has_glob(path):
        entry = store.stat(path)
        if entry is None:
            return []
        return _walk(store, entry)
    parts = path.split("/")
    fixed = 0
    while fixed < len(parts) and not has_glob(parts[fixed]):
        fixed += 1
    bases = ["/".join(parts[:fixed]) or ("/" if path.startswith("/") else ".")]
    for i, part in enumerate(parts[fixed:], start=fixed):
        last = i == len(parts) - 1
        found: list[str] = []
        for base in bases:
            if not has_glob(part):
                entry = store.stat(_child(base, part))
                if entry is not None and (last or entry.is_dir):
                    found.append(entry.path)
                continue
            entry = store.stat(base)
            if entry is None or not entry.is_dir:
                continue
            for child in store.listdir(base):
                name = child.path.rstrip("/").rsplit("/", 1)[-1]
                if fnmatch.fnmatchcase(name, part) and (last or child.is_dir):
                    found.append(child.path)
        bases = found
    files: list[Entry] = []
    for match in bases:
        entry = store.stat(match)
        if entry is not None:
            files.extend(_walk(store, entry))
    return sorted({e.path: e for e in files}.values(), key=lambda e: e.path)


def _child(base: str, name: str) -> str:
    return name if base == "." else f"{base.rstrip('/')}/{name}"


def _walk(store: Store, entry: Entry) -> list[Entry]:
    if not entry.is_dir:
        return [entry]
    out: list[Entry] = []
    for child in store.listdir(entry.path):
        if child.path.rstrip("/").rsplit("/", 1)[-1][:1] in (".", "_"):
            continue
        out.extend(_walk(store, child))
    return out


def walk_files(store: Store, path: str) -> dict[str, int]:
    """Every file under directory ``path`` by its path relative to it, with its size; empty
    when ``path`` does not exist yet (an output nothing was saved to)."""
    entry = store.stat(path)
    if entry is None or not entry.is_dir:
        return {}
    found: dict[str, int] = {}
    stack = [entry]
    while stack:
        for child in store.listdir(stack.pop().path):
            if child.is_dir:
                stack.append(child)
            else:
                found[os.path.relpath(child.path, path)] = child.size
    return found

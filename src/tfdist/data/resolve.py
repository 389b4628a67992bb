"""The files each input names, listed once on the driver before anything starts: globs
expanded, directories walked, sizes read; and each output's store reached. Everything a
user can get wrong here is a one-line SpecError naming the field (a glob that matches
nothing, a store that cannot be reached, a scheme no client here handles)."""

from __future__ import annotations

import os
import posixpath

from tfdist.data.shard import DataFile
from tfdist.errors import SpecError
from tfdist.jobspec.model import DataSpec, JobSpec
from tfdist.node import stores


def absolute(uri: str, workdir: str) -> str:
    """A relative path is relative to the job's workdir (like its command); URIs stay."""
    if stores.scheme_of(uri):
        return uri
    return os.path.normpath(os.path.join(workdir, uri))


def input_files(name: str, spec: DataSpec, workdir: str) -> list[DataFile]:
    """Every file of input ``name``, sorted by URI, each once."""
    found: dict[str, DataFile] = {}
    for i, given in enumerate(spec.uris):
        where = f"data.{name}.uris.{i}"
        uri = absolute(given, workdir)
        scheme, authority, path = stores.split(uri)
        try:
            store = stores.store_for(uri)
            entries = stores.expand(store, path)
        except OSError as err:
            raise SpecError(f"{where}: cannot list {given[:120]!r}: {err}; check the path and that "
                            "its store is up") from None
        if not entries:
            what = "matches no file" if stores.has_glob(path) else "does not exist (or holds no file)"
            raise SpecError(f"{where}: {given[:120]!r} {what}; check the path")
        for entry in entries:
            full = stores.join(scheme, authority, entry.path)
            found.setdefault(full, DataFile(full, entry.size, ""))
    files = sorted(found.values())
    return _with_rel(files)


def _with_rel(files: list[DataFile]) -> list[DataFile]:
    """Each file's path relative to the files' common directory (see DataFile.rel)."""
    paths = [stores.split(f.uri)[2] for f in files]
    common = posixpath.commonpath(paths) if all(p.startswith("/") for p in paths) else ""
    if common in paths:  # one file, or a file that is also a prefix
        common = posixpath.dirname(common)
    rels = [posixpath.relpath(p, common) if common else p.lstrip("/") for p in paths]
    if len(set(rels)) < len(rels):  # the same path on two stores: keep them apart
        rels = [f"{i:05d}/{r}" for i, r in enumerate(rels)]
    return [DataFile(f.uri, f.size, r) for f, r in zip(files, rels, strict=True)]


def check_output(name: str, uri: str, workdir: str) -> str:
    """The output's absolute URI, once its store answered; SpecError if it cannot be used."""
    where = f"outputs.{name}"
    uri = absolute(uri, workdir)
    _, _, path = stores.split(uri)
    try:
        store = stores.store_for(uri)
        entry = store.stat(path)
    except OSError as err:
        raise SpecError(f"{where}: cannot reach {uri[:120]!r}: {err}; check that its store is up") from None
    if entry is not None and not entry.is_dir:
        raise SpecError(f"{where}: {uri[:120]!r} is a file; name a directory (it is made if missing)")
    if not stores.scheme_of(uri) or stores.scheme_of(uri) == "file":
        parent = path
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
            raise SpecError(f"{where}: {uri[:120]!r} cannot be made ({parent} is not a writable "
                            "directory); choose another directory")
    return uri


def routes(uris: list[str]) -> dict[str, dict[str, str]]:
    """How the nodes reach the stores of ``uris`` (tfdist.node.stores.route): the address and
    user this machine listed them with, so a node needs no configuration of its own."""
    found: dict[str, dict[str, str]] = {}
    for uri in uris:
        got = stores.route(uri)  # the stores answered already: the address can be told
        if got is not None:
            found.setdefault(*got)
    return found


def resolve(job: JobSpec) -> tuple[dict[str, list[DataFile]], dict[str, str], dict[str, dict[str, str]]]:
    """``(files by input, output URIs by name, routes by store)`` of ``job``, listed and
    checked."""
    inputs = {name: input_files(name, spec, job.workdir) for name, spec in sorted(job.data.items())}
    outputs = {name: check_output(name, uri, job.workdir) for name, uri in sorted(job.outputs.items())}
    uris = [f.uri for files in inputs.values() for f in files] + list(outputs.values())
    return inputs, outputs, routes(uris)

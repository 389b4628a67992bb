"""A task's data on the node it runs on, before its script starts: staged inputs copied to a
local cache, output directories filled from their URIs, and the variables that tell the
script where they are.

The driver (:mod:`tfdist.data.plan`) puts the task's share in ``TFDIST_NODE_PLAN`` (JSON);
whoever starts the task's process (the local backend, the Spark/YARN agent, the Ray actor)
calls :func:`prepare` with the task's environment and a directory of its own on this node,
then starts the process with the variables it returns and keeps the outputs it returns
(:class:`tfdist.node.outputs.Mirror`) until the process ends.

The cache: each staged file is kept under ``<root>/inputs/<name>/<its path relative to the
input's common directory>`` and listed in ``<root>/inputs/<name>/.tfdist-staged.json`` with
its URI and size once copied whole; a restarted task on the same node finds it there and
copies nothing (its progress line says ``cached``).

Standard library only: it runs inside Spark executors and YARN containers.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfdist import contract
from tfdist.node import stores
from tfdist.node.outputs import TMP_SUFFIX, Mirror
from tfdist.states import bytes_text

MANIFEST = ".tfdist-staged.json"
#: Seconds between two progress lines while one input is being copied.
PROGRESS_EVERY = 5.0


def env_name(prefix: str, name: str) -> str:
    """``TFDIST_DATA_TRAIN`` for input ``train`` (names are ``[a-z][a-z0-9_]*``)."""
    return prefix + name.upper()


@dataclass
class Prepared:
    """What :func:`prepare` did: the variables to add, the outputs to keep, and a report."""

    env: dict[str, str] = field(default_factory=dict)
    mirrors: list[Mirror] = field(default_factory=list)
    seconds: float = 0.0
    files: int = 0
    copied: int = 0
    bytes: int = 0

    def start(self) -> None:
        for mirror in self.mirrors:
            mirror.start()

    def close(self) -> None:
        """The task ended: the last pass of every output (see Mirror.close)."""
        for mirror in self.mirrors:
            mirror.close()



def _load_manifest(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_manifest(path: str, manifest: dict[str, Any]) -> None:
    """Written beside and renamed: a manifest is whole or the previous one. It is saved once
    a second and at the end, not per file (512 small files took 2.9x a ``cp`` of them when
    it was rewritten after each one); a file copied but not yet listed is copied again."""
    with open(path + TMP_SUFFIX, "w", encoding="utf-8") as out:
        json.dump(manifest, out)
    os.replace(path + TMP_SUFFIX, path)


def stage_input(name: str, files: list[dict[str, Any]], dest: str, emit: Callable[[str], None],
                routes: Mapping[str, Mapping[str, str]] | None = None) -> tuple[list[str], int, int]:
    """Copy ``files`` (``{"uri", "size", "rel"}``) under ``dest``, those not cached there
    already, reaching their stores by ``routes`` (see stores.store_for); returns ``(local
    paths in the given order, files copied, bytes copied)``."""
    os.makedirs(dest, exist_ok=True)
    manifest_path = os.path.join(dest, MANIFEST)
    manifest = _load_manifest(manifest_path)
    paths: list[str] = []
    todo: list[tuple[dict[str, Any], str]] = []
    for f in files:
        rel = str(f["rel"])
        if rel.startswith("/") or ".." in rel.split("/"):
            raise ValueError(f"input {name}: {rel!r} is no relative path")
        local = os.path.join(dest, rel)
        paths.append(local)
        kept = manifest.get(rel)
        cached = (isinstance(kept, dict) and kept.get("uri") == f["uri"] and kept.get("size") == f["size"]
                  and os.path.isfile(local) and os.path.getsize(local) == f["size"])
        if not cached:
            todo.append((f, local))
    done = 0
    last = time.monotonic()
    wanted = sum(int(f["size"]) for f, _ in todo)
    saved = time.monotonic()
    try:
        for f, local in todo:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            store = stores.store_for(f["uri"], routes)
            done += store.get(stores.split(f["uri"])[2], local)
            manifest[str(f["rel"])] = {"uri": f["uri"], "size": f["size"]}
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY:  # a line now and then on a long copy
                last = now
                emit(f"tfdist: staging {name}: {bytes_text(done)} of {bytes_text(wanted)} copied")
            if now - saved >= 1.0:  # what is copied stays copied if the task is stopped now
                _save_manifest(manifest_path, manifest)
                saved = now
    finally:
        if todo:
            _save_manifest(manifest_path, manifest)
    return paths, len(todo), done


def prepare(env: Mapping[str, str], root: str, emit: Callable[[str], None]) -> Prepared:
    """Stage the task's inputs and fill its outputs under ``root`` (see the module's doc);
    ``emit`` writes a line to the task's log. Raises OSError (a store that cannot be
    read) or ValueError (a plan that is not one): the task cannot start."""
    raw = env.get(contract.DATA_PLAN)
    result = Prepared()
    if not raw:
        return result
    plan = json.loads(raw)
    if not isinstance(plan, dict):
        raise ValueError(f"{contract.DATA_PLAN} is not a JSON object")
    routes = plan.get("stores") or {}
    if not isinstance(routes, dict):
        raise ValueError(f"{contract.DATA_PLAN}'s stores is not a JSON object")
    started = time.monotonic()
    staged_any = False
    for item in plan.get("inputs", []):
        name = str(item["name"])
        files = list(item["files"])
        t0 = time.monotonic()
        paths, copied, nbytes = stage_input(name, files, os.path.join(root, "inputs", name), emit, routes)
        total = sum(int(f["size"]) for f in files)
        seconds = time.monotonic() - t0
        rate = f", {bytes_text(nbytes / seconds)}/s" if copied and seconds > 0 else ""
        emit(f"tfdist: staged {name}: {len(files)} files, {bytes_text(total)} in {seconds:.2f} s "
             f"(copied {copied}, cached {len(files) - copied}{rate})")
        result.env[env_name(contract.DATA_PREFIX, name)] = json.dumps(paths)
        result.files += len(files)
        result.copied += copied
        result.bytes += nbytes
        staged_any = True
    for item in plan.get("outputs", []):
        name, uri = str(item["name"]), str(item["uri"])
        local = os.path.join(root, "outputs", name)
        mirror = Mirror(name, local, uri, emit, follow=bool(item.get("follow")), routes=routes)
        restored, nbytes = mirror.restore()
        if restored:
            emit(f"tfdist: output {name}: {restored} files ({bytes_text(nbytes)}) restored from {uri}")
        result.env[env_name(contract.OUTPUT_PREFIX, name)] = local
        if item.get("writer") or item.get("follow"):
            result.mirrors.append(mirror)
    result.seconds = time.monotonic() - started
    if staged_any:
        mark = {contract.MARK: contract.MARK_STAGE, "seconds": round(result.seconds, 3),
                "files": result.files, "copied": result.copied, "bytes": result.bytes}
        emit(contract.PROGRESS_PREFIX + json.dumps(mark))
    return result


def task_root(base: str, task: str) -> str:
    """The task's own directory for data on this node, under ``base``."""
    return os.path.join(base, "tfdist-data", task)


def without_plan(env: Mapping[str, str]) -> dict[str, str]:
    """The task's environment without the plan (the script has the variables; a plan of
    many files must not count against the size of its environment twice)."""
    return {k: v for k, v in env.items() if k != contract.DATA_PLAN}

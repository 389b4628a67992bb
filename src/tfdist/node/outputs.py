"""An output directory kept at its URI: the task writes locally, a thread copies what it
saved to the store as it is saved, and a restarted task starts from the copy.

What is guaranteed (docs/data.md says the same to users):

- a file is copied once it has looked the same (size and modification time) in two passes
  :data:`INTERVAL` seconds apart, so a file still being written is not copied half-way, and
  copied again whenever it changes; a file the task deletes is deleted at the URI;
- files that name others (TensorFlow's ``checkpoint`` state file, a SavedModel's
  ``saved_model.pb``) are copied after the files of the same pass, and a state file only once
  every checkpoint it names is all there, so the copy at the URI never points to a checkpoint
  whose data is not there yet;
- TensorFlow's ``checkpoint`` state file is rewritten at every save, so a job that saves more
  often than every two passes never leaves it stable: then each pass writes a state file of
  its own at the URI naming the newest checkpoint whose files are all there, so the URI
  always has a checkpoint to resume from (the last pass copies the task's own);
- when the task ends, however it ends (a SIGKILL too: the copier is not the task), a last pass
  copies everything as it is;
- every copy replaces the target whole (written beside it, then renamed).

Standard library only: it runs in the agent on a Spark or YARN node.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping

from tfdist.node import stores

#: Seconds between two passes over the directory.
INTERVAL = 2.0
#: Files copied last in a pass: they name the others.
LAST = frozenset({"checkpoint", "saved_model.pb", "fingerprint.pb", "keras_metadata.pb"})
TMP_SUFFIX = ".tfdist-tmp"
#: TensorFlow's checkpoint state file (``tf.train.latest_checkpoint`` reads it).
STATE = "checkpoint"
#: The most of a state file read (it names checkpoints, one line each).
_STATE_BYTES = 1 << 16
#: Files on their way in at a URI, never read from it: tfdist's own and HDFS's (``hdfs dfs
#: -put`` and tfdist.node.webhdfs write ``X._COPYING_`` and rename it).
PARTIAL = (TMP_SUFFIX, "._COPYING_")


def _scan(local: str) -> dict[str, tuple[int, int]]:
    """Every file under ``local`` by relative path: ``(size, mtime_ns)``."""
    found: dict[str, tuple[int, int]] = {}
    for top, _dirs, files in os.walk(local):
        for name in files:
            if name.endswith(TMP_SUFFIX):
                continue
            path = os.path.join(top, name)
            try:
                st = os.stat(path)
            except OSError:
                continue  # removed while walking
            found[os.path.relpath(path, local)] = (st.st_size, st.st_mtime_ns)
    return found


def order(paths: list[str]) -> list[str]:
    """The order files are copied in: names in :data:`LAST` after the others, each sorted."""
    return sorted(paths, key=lambda p: (os.path.basename(p) in LAST, p))


def parse_state(text: str) -> list[str]:
    """The checkpoints a TensorFlow ``checkpoint`` state file names, oldest first and the
    current one (``model_checkpoint_path``) last."""
    current, every = None, []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if len(value) < 2 or value[0] != '"' or value[-1] != '"':
            continue
        if key.strip() == "model_checkpoint_path":
            current = value[1:-1]
        elif key.strip() == "all_model_checkpoint_paths":
            every.append(value[1:-1])
    return [n for n in every if n != current] + ([current] if current else [])


def state_text(names: list[str]) -> str:
    """A ``checkpoint`` state file naming ``names`` (oldest first; the last is current)."""
    return f'model_checkpoint_path: "{names[-1]}"\n' + "".join(
        f'all_model_checkpoint_paths: "{n}"\n' for n in names)


class Mirror:
    """Keep directory ``local`` copied to ``uri`` (or, with ``follow``, keep ``local`` updated
    from ``uri``: the evaluator's view of the chief's checkpoints)."""

    def __init__(self, name: str, local: str, uri: str, emit: Callable[[str], None],
                 interval: float = INTERVAL, follow: bool = False,
                 routes: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.follow = follow
        self.name = name
        self.local = local
        self.uri = uri
        self.emit = emit
        self.interval = interval
        self._scheme, self._authority, self._root = stores.split(uri)
        self._store = stores.store_for(uri, routes)
        self._copied: dict[str, tuple[int, int]] = {}  # what the URI holds, as seen locally
        self._seen: dict[str, tuple[int, int]] = {}  # the previous pass's scan
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._failing = False
        self._states: dict[str, list[str]] = {}  # state file -> the names last written for it

    def _target(self, rel: str) -> str:
        return f"{self._root.rstrip('/')}/{rel.replace(os.sep, '/')}"

    def restore(self) -> tuple[int, int]:
        """Fill the local directory from the URI's current content (files missing here or of
        another size); returns ``(files, bytes)`` copied. What is here afterwards counts as
        copied already, so it is not sent back."""
        os.makedirs(self.local, exist_ok=True)
        files = bytes_ = 0
        remote = stores.walk_files(self._store, self._root)
        for rel in order([r for r in remote if not r.endswith(PARTIAL)]):
            if self._fetch(rel, remote[rel]):
                files += 1
                bytes_ += remote[rel]
        self._copied = self._seen = {rel: stat for rel, stat in _scan(self.local).items() if rel in remote}
        return files, bytes_

    def _fetch(self, rel: str, size: int) -> int:
        """Copy ``rel`` from the URI unless the local copy is the same; 1 if it copied. A store
        lists no modification times, so a file of the same size counts as the same, except the
        small files of :data:`LAST`, which are read each time and compared (TensorFlow's
        ``checkpoint`` keeps its size from ``ckpt-1`` to ``ckpt-2``)."""
        path = os.path.join(self.local, rel)
        try:
            same_size = os.path.getsize(path) == size
        except OSError:
            same_size = False
        if same_size and os.path.basename(rel) not in LAST:
            return 0
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not same_size:
            self._store.get(self._target(rel), path)
            return 1
        fresh = path + ".tfdist-new" + TMP_SUFFIX
        try:
            self._store.get(self._target(rel), fresh)
            with open(fresh, "rb") as new, open(path, "rb") as old:
                if new.read() == old.read():
                    return 0
            os.replace(fresh, path)
            return 1
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(fresh)

    def start(self) -> None:
        if self._stop.is_set():  # the task ended before it could start: close() made the last pass
            return
        self._thread = threading.Thread(target=self._run, name=f"tfdist-output-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.follow:
                self.pull()
            else:
                self.sync(final=False)

    def pull(self) -> int:
        """One pass the other way: the files at the URI that are new or of another size here,
        in :func:`order` (a checkpoint's files before the state file naming it, as the writer
        copied them); returns how many."""
        with self._lock:
            done = 0
            try:
                remote = stores.walk_files(self._store, self._root)
                for rel in order([r for r in remote if not r.endswith(PARTIAL)]):
                    done += self._fetch(rel, remote[rel])
            except (OSError, ValueError) as err:
                if not self._failing:
                    self.emit(f"tfdist: output {self.name}: cannot read {self.uri}: {err}; trying again")
                self._failing = True
                return done
            self._failing = False
            return done

    def sync(self, final: bool) -> int:
        """One pass; returns how many files it copied. ``final``: copy everything as it is
        (the task has ended), not only what was stable since the last pass."""
        with self._lock:
            now = _scan(self.local) if os.path.isdir(self.local) else {}
            changed = [rel for rel, stat in now.items() if self._copied.get(rel) != stat
                       and (final or self._seen.get(rel) == stat)]
            gone = [rel for rel in self._copied if rel not in now]
            self._seen = now
            done = 0
            try:
                for rel in order(changed):
                    if os.path.basename(rel) == STATE and not self._names_copied(rel, now):
                        continue  # named a checkpoint not all here yet: _put_state below
                    self._store.put(os.path.join(self.local, rel), self._target(rel))
                    self._copied[rel] = now[rel]
                    done += 1
                for rel in now:
                    if os.path.basename(rel) == STATE and self._copied.get(rel) != now[rel]:
                        done += self._put_state(rel, now)
                for rel in gone:
                    self._store.delete(self._target(rel))
                    del self._copied[rel]
            except (OSError, ValueError) as err:  # the store went away: say so once, try again
                if final or not self._failing:
                    self.emit(f"tfdist: output {self.name}: cannot copy to {self.uri}: {err}"
                              f"{'' if final else '; trying again'}")
                self._failing = True
                return done
            if self._failing:
                self.emit(f"tfdist: output {self.name}: copying to {self.uri} again")
                self._failing = False
            return done

    def _names_copied(self, rel: str, now: dict[str, tuple[int, int]]) -> bool:
        """Whether every checkpoint the state file ``rel`` names has its ``.index`` and all its
        files copied as they are now. A state file can look stable while a checkpoint it names
        does not: a pass lists the directory, then reads each file's size and time, so a save
        that lands between the two shows the new state file but not yet the new index (seen
        once: a container killed right after such a pass left ``checkpoint`` naming a
        ``ckpt-N`` without its files at the URI)."""
        try:
            with open(os.path.join(self.local, rel), encoding="utf-8", errors="replace") as f:
                named = parse_state(f.read(_STATE_BYTES))
        except OSError:
            return False
        base = os.path.dirname(rel)
        for name in named:
            if os.path.isabs(name) or ".." in name.split("/"):
                return False
            prefix = os.path.join(base, name) + "."
            files = [r for r in now if r.startswith(prefix)]
            if prefix + "index" not in files or any(self._copied.get(r) != now[r] for r in files):
                return False
        return True

    def _put_state(self, rel: str, now: dict[str, tuple[int, int]]) -> int:
        """A state file that is not stable (saves come faster than two passes): write one
        at the URI naming the newest checkpoint beside it (``NAME.index``, and any the
        task's state file names) whose files are all copied; 1 if it wrote one."""
        path = os.path.join(self.local, rel)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                named = parse_state(f.read(_STATE_BYTES))
        except OSError:
            return 0
        base = os.path.dirname(rel)
        beside = [r[len(base) + 1 if base else 0:-len(".index")] for r in now
                  if r.endswith(".index") and os.path.dirname(r) == base]

        def files(name: str) -> list[str]:
            if os.path.isabs(name) or ".." in name.split("/"):
                return []
            prefix = os.path.join(base, name) + "."
            return [r for r in now if r.startswith(prefix)]

        kept = {n: max(now[r][1] for r in fs) for n in dict.fromkeys([*named, *beside])
                if (fs := files(n)) and all(self._copied.get(r) == now[r] for r in fs)}
        names = sorted(kept, key=lambda n: (kept[n], n))  # oldest first, by their files' times
        if not names or names == self._states.get(rel):
            return 0
        tmp = f"{path}.tfdist-state{TMP_SUFFIX}"
        try:
            with open(tmp, "w", encoding="utf-8") as out:
                out.write(state_text(names))
            self._store.put(tmp, self._target(rel))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._states[rel] = names
        return 1

    def close(self) -> int:
        """Stop the thread and make the last pass; returns how many files it copied (none
        when it follows: the task that reads has ended)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return 0 if self.follow else self.sync(final=True)


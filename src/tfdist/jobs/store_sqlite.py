"""The job store in one SQLite file (stdlib ``sqlite3``): the embedded default, one user's
history under ``$TFDIST_HOME``.

WAL mode with a busy timeout, so many tfdist processes (supervisors writing, ``list`` and
``status`` reading) share the file safely; every write is one short ``BEGIN IMMEDIATE``
transaction, which takes SQLite's single write lock up front. A new store is built under a
temporary name and linked into place, so no process ever opens a half-made one, and an
empty file is reported as a store whose history is gone, never read as "no jobs yet".
What SQLite's errors mean is :mod:`tfdist.jobs.faults`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from tfdist.errors import StoreError
from tfdist.jobs import faults
from tfdist.jobs.dialect import Db, rollback_on_error, upgrade
from tfdist.jobs.location import StoreLocation
from tfdist.jobs.tables import SCHEMA_VERSION

REAL = "REAL"
SERIAL = "INTEGER PRIMARY KEY AUTOINCREMENT"


def _set_version(db: Db, version: int) -> None:
    db.execute(f"PRAGMA user_version={int(version)}")


class SqliteDialect:
    errors: tuple[type[BaseException], ...] = (sqlite3.Error, OSError)

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.location = StoreLocation(path=path)
        self.timeout = timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        other = faults.not_a_file(self.path)
        if other:
            raise StoreError(f"cannot open the job store {self.path}: it is {other}, not a file; "
                             "move it away, or name an SQLite file with TFDIST_STORE (or a "
                             "directory with TFDIST_HOME)", "permission")
        if not self.path.exists():
            self._create()
        elif self.path.is_file() and self.path.stat().st_size == 0 and not self._has_wal():
            # tfdist never leaves its store at 0 bytes (it is created whole, then renamed), so
            # an empty one was cut by something else: not read as "no jobs yet", not called damaged
            raise StoreError(f"job store {self.path} is an empty file (0 bytes): tfdist did not "
                             "make it so, and any history it held is gone; move it away to start "
                             f"a new one: mv {self.path} {self.path}.bad", "corrupt")
        self._db = sqlite3.connect(str(self.path), timeout=self.timeout,
                                   isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        if self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        if self._version(self._db) < SCHEMA_VERSION:
            with self.transaction() as db:
                upgrade(db, self._version(db), _set_version, REAL, SERIAL)

    @staticmethod
    def _version(db: Db) -> int:
        return int(db.execute("PRAGMA user_version").fetchone()[0])

    def _has_wal(self) -> bool:
        wal = self.path.with_name(self.path.name + "-wal")
        return wal.exists() and wal.stat().st_size > 0

    def _create(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}-{threading.get_ident()}.new")
        db = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            # the user's only (SQLite gives its -wal and -shm the same mode): a root cause
            # keeps the last lines of a task's log, and logs hold secrets
            os.chmod(tmp, 0o600)
            db.execute("PRAGMA journal_mode=WAL")
            upgrade(db, 0, _set_version, REAL, SERIAL)
        finally:
            db.close()
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            pass  # another process made it first
        except OSError:  # no hard links on this filesystem
            if not self.path.exists():
                os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)

    def db(self) -> Db:
        return self._db

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Db]:
        db = self._db
        with rollback_on_error(lambda: db.execute("BEGIN IMMEDIATE"),
                               lambda: db.execute("COMMIT"), lambda: db.execute("ROLLBACK")):
            yield db

    def classify(self, err: BaseException, what: str) -> StoreError:
        return faults.classify(err, self.path, what, self.timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._db.close()

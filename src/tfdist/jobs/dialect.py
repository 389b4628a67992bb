"""What the job store needs from a database, and nothing else: the seam between
:class:`~tfdist.jobs.store.Store` (every query and write, written once) and the two places
the history can live, :mod:`~tfdist.jobs.store_sqlite` and :mod:`~tfdist.jobs.store_postgres`.

The queries are written once, with ``?`` placeholders and SQL both databases speak; a
dialect opens the database, brings its schema up to date, runs a write transaction that
holds the store's one write lock (so a read-then-write, such as picking a free job id, is
never raced by another process), and says what an error of its driver means as a
:class:`~tfdist.errors.StoreError` of the right ``kind`` (the recorder retries a locked store,
a full disk or a lost server, and gives up on a damaged one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from tfdist.errors import StoreError
from tfdist.home import current_user
from tfdist.jobs import tables
from tfdist.jobs.location import StoreLocation


class Cursor(Protocol):
    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Db(Protocol):
    """A connection as the store's operations see it: rows read by column name."""

    def execute(self, sql: str, args: Sequence[Any] = ..., /) -> Cursor: ...


class Dialect(Protocol):
    location: StoreLocation
    #: The driver's exceptions (and OSError) that :meth:`classify` turns into StoreErrors.
    errors: tuple[type[BaseException], ...]

    def db(self) -> Db:
        """The connection for reads (autocommit), reconnected if it was lost."""
        ...

    def transaction(self) -> contextlib.AbstractContextManager[Db]:
        """One write transaction holding the store's write lock (waiting up to the timeout)."""
        ...

    def classify(self, err: BaseException, what: str) -> StoreError: ...

    def close(self) -> None: ...


def upgrade(db: Db, version: int, set_version: Callable[[Db, int], None], real: str,
            serial: str) -> None:
    """Bring a store at ``version`` (0: empty) to :data:`tables.SCHEMA_VERSION`, in the
    caller's transaction. Jobs recorded before users were (version 1) are this user's."""
    if version >= tables.SCHEMA_VERSION:
        return
    if version > 0:
        for step in range(version + 1, tables.SCHEMA_VERSION + 1):
            for stmt in tables.MIGRATIONS.get(step, ()):
                db.execute(stmt)
    for stmt in tables.statements(real, serial):
        db.execute(stmt)
    if 0 < version < 2:
        db.execute("UPDATE jobs SET username = ? WHERE username IS NULL", (current_user(),))
    set_version(db, tables.SCHEMA_VERSION)


@contextlib.contextmanager
def rollback_on_error(begin: Callable[[], object], commit: Callable[[], object],
                      rollback: Callable[[], object]) -> Iterator[None]:
    begin()
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            rollback()
        raise
    commit()

"""Where the job store is: an SQLite file under ``$TFDIST_HOME`` (one user's history, the
default) or a PostgreSQL database named by ``TFDIST_STORE`` (a team's shared history).

Light on purpose (no ``sqlite3``, no driver): ``tfdist run`` and ``submit`` check the setting
before anything starts, so a typo in ``TFDIST_STORE`` is bad input (one line, exit 2), not a
job that runs unrecorded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from tfdist.errors import SpecError
from tfdist.home import home

STORE_ENV = "TFDIST_STORE"
#: The URL schemes that name a PostgreSQL database (libpq accepts both).
POSTGRES_SCHEMES = ("postgresql", "postgres")


def default_path() -> Path:
    return home() / "jobs.db"


@dataclass(frozen=True)
class StoreLocation:
    """An SQLite file (``path``) or a PostgreSQL URL (``url``), exactly one of them."""

    path: Path | None = None
    url: str | None = None

    @property
    def kind(self) -> str:
        return "postgresql" if self.url else "sqlite"

    def __str__(self) -> str:
        """What messages show: the file, or the URL without its password."""
        return redact(self.url) if self.url else str(self.path)


def redact(url: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rpartition("@")
        user = (parts.username or "") + ":***"
        return urlunsplit(parts._replace(netloc=f"{user}@{netloc[2]}"))
    except ValueError:
        return "postgresql://(unreadable URL)"


def parse(text: str | Path, what: str = STORE_ENV) -> StoreLocation:
    """A location from a path or a URL; anything with another scheme is bad input."""
    if isinstance(text, Path):
        return StoreLocation(path=text)
    if "\x00" in text:
        raise SpecError(f"{what}: contains a NUL byte; give postgresql://... or a file path")
    if not text.strip():
        raise SpecError(f"{what}: empty; give postgresql://USER@HOST/DATABASE or a path to an "
                        "SQLite file")
    scheme, sep, _ = text.partition("://")
    if sep:
        if scheme.lower() in POSTGRES_SCHEMES:
            try:  # a file's name may be any bytes, a URL the driver is given may not
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise SpecError(f"{what}: {redact(text)!r} is not UTF-8 text; give "
                                "postgresql://USER@HOST[:PORT]/DATABASE") from None
            check_url(text, what)
            return StoreLocation(url=text)
        if scheme.lower() == "sqlite":
            return StoreLocation(path=Path(text[len("sqlite://"):]).expanduser())
        raise SpecError(f"{what}: {redact(text)!r} is not a job store tfdist knows; give "
                        "postgresql://USER@HOST/DATABASE, or a path to an SQLite file "
                        "(unset it for the default, $TFDIST_HOME/jobs.db)")
    return StoreLocation(path=Path(text).expanduser())


#: libpq's values of ``sslmode``.
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def check_url(url: str, what: str = STORE_ENV) -> None:
    """A PostgreSQL URL's parts that are plainly malformed (a port that is not one, an
    unknown ``sslmode``) are bad input here; the driver would report them as a server that
    cannot be reached. libpq's URLs may name several hosts (``h1:5432,h2:5433``)."""
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query, keep_blank_values=True)
    except ValueError as err:
        raise SpecError(f"{what}: {redact(url)!r} is not a URL ({err}); give "
                        "postgresql://USER@HOST[:PORT]/DATABASE") from None
    hosts = parts.netloc.rpartition("@")[2]
    ports = []
    for host in hosts.split(","):
        port = host.rpartition("]")[2] if host.startswith("[") else host
        _, colon, number = port.rpartition(":") if ":" in port else ("", "", "")
        ports += [number] if colon else []
    for given in query.get("port", []):  # ?port=5433 (or a list, one per host) overrides them
        ports += given.split(",")
    for number in ports:
        if number and not (number.isascii() and number.isdigit() and 1 <= int(number) <= 65535):
            shown = number if number.isdigit() else repr(number[:20])
            raise SpecError(f"{what}: the port {shown} of {redact(url)!r} is not a port (1-65535); "
                            "give postgresql://USER@HOST[:PORT]/DATABASE")
    for seconds in query.get("connect_timeout", []):
        if not (seconds.strip().isascii() and seconds.strip().lstrip("-").isdigit()):
            raise SpecError(f"{what}: connect_timeout {seconds[:20]!r} of {redact(url)!r} is not a "
                            "whole number of seconds")
    for mode in query.get("sslmode", []):
        if mode not in SSLMODES:
            raise SpecError(f"{what}: sslmode {mode[:40]!r} is not one libpq knows; give one of "
                            f"{', '.join(SSLMODES)}")


def location() -> StoreLocation:
    """The job store of this process: ``TFDIST_STORE`` if set, else ``$TFDIST_HOME/jobs.db``."""
    text = os.environ.get(STORE_ENV, "").strip()
    return parse(text) if text else StoreLocation(path=default_path())

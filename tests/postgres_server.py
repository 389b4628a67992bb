"""A real PostgreSQL server for the tests: Debian's ``initdb`` in a temporary directory,
listening on 127.0.0.1 only (and a Unix socket in that directory), with a random password;
stopped and removed at the end of the session.

PostgreSQL refuses to run as root, so under root (CI) the server runs as the ``postgres``
user that Debian's package creates, in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def unavailable() -> str | None:
    """Why no server can be started here (None: it can)."""
    for tool in ("initdb", "pg_ctl"):
        if _pg_bin(tool) is None:
            return f"PostgreSQL's {tool} is not installed (apt-get install postgresql; .ci/run does)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'tfdist[postgres]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    root: Path
    port: int
    password: str
    user: str = "tfdist"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def admin(self):  # type: ignore[no-untyped-def]
        import psycopg

        return psycopg.connect(self.url(), autocommit=True)

    def create_database(self, name: str) -> str:
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        with contextlib.suppress(Exception), self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def running_server():  # type: ignore[no-untyped-def]
    root = Path(tempfile.mkdtemp(prefix="tfdist-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    root.chmod(0o700)
    password = secrets.token_hex(16)
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(pwfile, "postgres")
    data = root / "data"
    port = _free_port()
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    assert initdb and pg_ctl
    subprocess.run(_as_server_user([initdb, "-D", str(data), "-U", "tfdist", "-E", "UTF8",
                                    "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync"]),
                   check=True, capture_output=True, timeout=120)
    options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off -c max_connections=60")
    started = False
    try:
        subprocess.run(_as_server_user([pg_ctl, "-D", str(data), "-o", options, "-l",
                                        str(root / "server.log"), "-w", "-t", "60", "start"]),
                       check=True, capture_output=True, timeout=90)
        started = True
        server = PostgresServer(root, port, password)
        deadline = time.monotonic() + 30
        while True:
            try:
                server.admin().close()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield server
    finally:
        if started:
            subprocess.run(_as_server_user([pg_ctl, "-D", str(data), "-m", "immediate", "-w",
                                            "-t", "30", "stop"]), capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)

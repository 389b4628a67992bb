"""``tfdist ui``: the dashboard served by uvicorn, on 127.0.0.1 unless ``--host`` says
otherwise, behind a token printed with the URL at start (:mod:`.auth`).

The store is opened before the port, so a bad ``TFDIST_STORE`` or an unreachable database
is one line and nothing listens. The socket is bound here (``--port 0`` picks a free port
and the URL names it), then handed to uvicorn; Ctrl-C or SIGTERM stops it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import sys
from typing import IO

from tfdist.errors import BackendError, SpecError, TfdistError
from tfdist.jobs.location import StoreLocation, location


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise SpecError(f"--port: {port} is not a port (0-65535; 0 picks a free one)")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise SpecError(f"--host: cannot resolve {host!r} ({err.strerror}); give an address of "
                        "this machine, e.g. 127.0.0.1") from None
    except UnicodeError as err:  # the name cannot be a host name (bytes that are no text, a
        # label over 63 characters): the resolver's IDNA encoding refuses it
        raise SpecError(f"--host: {host[:80]!r} is not a host name ({err}); give an address of "
                        "this machine, e.g. 127.0.0.1") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise BackendError(f"cannot listen on {host}:{port} ({err.strerror}); choose another "
                           "--port (0 picks a free one)") from None
    sock.set_inheritable(False)
    return sock


def serve(host: str = "127.0.0.1", port: int = 0, where: StoreLocation | None = None,
          out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    try:
        import uvicorn

        from tfdist.ui.app import create_app, plotly_js
        plotly_js()
    except (ImportError, FileNotFoundError) as err:
        raise TfdistError(f"tfdist ui needs the dashboard's packages ({err}); install them with "
                          "pip install 'tfdist[ui]'") from None
    from tfdist.jobs.store import Store
    from tfdist.ui.auth import new_token

    where = where or location()
    Store(where).close()  # an unusable store is one line, before anything listens
    sock = bind(host, port)
    token = new_token()
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    if not is_loopback(host):
        print(f"tfdist ui: listening on {host}, reachable from other machines: anyone with the "
              "token below can read every job's logs and stop jobs", file=out, flush=True)
    print(f"tfdist ui: the job store {where}", file=out, flush=True)
    print(f"tfdist ui: http://{shown}:{bound[1]}/?token={token}", file=out, flush=True)
    app = create_app(where, token)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    with contextlib.closing(sock):
        server.run(sockets=[sock])
    return 0

"""Race-free ports for local tasks.

The classic launcher bug (TonY, TensorFlowOnSpark, TensorFlow's own test utilities): pick a
free port, close the probe socket, hand the number to a task, and hope nobody takes it in
between. Instead we bind the port with ``SO_REUSEPORT`` and keep the socket open for the
whole job. Nothing else can bind it (a plain bind fails while we hold it), but the task can,
because TensorFlow sets ``SO_REUSEPORT`` on its gRPC listener when ``TF_GRPC_REUSE_PORT=1``.
Our socket never listens, so every connection goes to the task. Holding the port until the
job ends also keeps it for restarted tasks.
"""

from __future__ import annotations

import socket


class PortHolder:
    """Reserve ports on ``host`` and hold them until :meth:`close`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._sockets: list[socket.socket] = []

    def reserve(self) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            # Bind the wildcard address: TensorFlow listens on 0.0.0.0, and a held
            # wildcard bind blocks every other non-reusing bind of this port.
            sock.bind(("0.0.0.0", 0))
        except OSError:
            sock.close()
            raise
        self._sockets.append(sock)
        return int(sock.getsockname()[1])

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()

    def __enter__(self) -> PortHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

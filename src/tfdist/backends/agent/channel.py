"""The driver's side of the channel to the Spark agents (see :mod:`tfdist.node.agent`).

A small TCP server inside the tfdist supervisor. It is an attack surface, so:

- it binds only the address the executors use to reach the driver (``spark.driver.host``),
  never the wildcard;
- every connection must prove within a few seconds that it knows the job's random secret
  (HMAC over a fresh nonce; the secret itself is never sent on the channel), or it is closed;
  the driver proves the same back, so an agent only obeys the real driver;
- nothing a connection sends is ever executed on the driver: agents only report (address,
  output lines, exits); commands go the other way and the command line itself comes from
  the job spec shipped with the stage, not from the channel;
- a connection may claim only a task of this job that has no live agent (an agent of a stage
  that is ending does not count: its successor on the next stage takes its place), and one
  message is at most ``node_agent.MAX_MESSAGE`` bytes (the hello, before its proof is
  checked, :data:`HELLO_BYTES`).

Heartbeats: the channel sends each agent ``beat`` every ``beat`` seconds, and an agent that
says nothing (not even its own beat) for ``silence`` seconds is taken for gone: its
connection is closed and ``on_message(name, None)`` says so, as when it drops. This is what
notices a host cut off from the network, whose connections never close by themselves.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

from tfdist.node import agent as node_agent

HANDSHAKE_SECONDS = 10.0
#: A hello (before its proof is checked, from anyone) is at most this many bytes; an agent's
#: holds a few names, paths and numbers.
HELLO_BYTES = 64 * 1024


class AgentLink:
    """One authenticated agent: the task it runs, what it reported, its socket."""

    def __init__(self, name: str, sock: socket.socket, info: dict[str, Any]) -> None:
        self.name = name
        self.sock = sock
        self.info = info
        self.lock = threading.Lock()
        self.alive = True
        self.closing = False  # the driver ended it: its end of connection is no loss
        #: Why the connection ended ("" while alive): closed, or silent for how long.
        self.ended = ""

    def send(self, message: dict[str, Any]) -> bool:
        return self.alive and node_agent.send(self.sock, self.lock, message)

    def close(self) -> None:
        self.closing = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class Channel:
    """Accept agents, authenticate them, route their messages.

    ``on_message(name, message)`` gets every report of an agent after the handshake, and
    ``on_message(name, None)`` once when its connection ends (``link(name).ended`` says how).
    ``ports`` maps a task to the port its agent must hold (a replacement agent keeps the
    address TF_CONFIG has; with ``any_port_elsewhere``, only on the same host).
    """

    def __init__(
        self,
        host: str,
        secret: str,
        tasks: list[str],
        on_message: Callable[[str, dict[str, Any] | None], None],
        *,
        beat: float = node_agent.BEAT_SECONDS,
        silence: float = node_agent.SILENCE_SECONDS,
        any_port_elsewhere: bool = False,
    ) -> None:
        self.secret = secret
        #: An agent on another host than the task's last, or taking over from an agent the
        #: driver ended, gets any free port (YARN: a replacement container on another node),
        #: not the one the task had.
        self.any_port_elsewhere = any_port_elsewhere
        self.beat = beat
        self.silence = silence
        self.tasks = tasks
        self.ports: dict[str, int] = {}
        self.links: dict[str, AgentLink] = {}
        self.cond = threading.Condition()
        self._on_message = on_message
        self._closed = False
        self.server = socket.create_server((host, 0), backlog=64)
        self.address: tuple[str, int] = (host, int(self.server.getsockname()[1]))
        threading.Thread(target=self._accept, name="spark-channel", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), name="spark-agent", daemon=True).start()

    def _handshake(self, sock: socket.socket, reader: node_agent.LineReader) -> AgentLink | None:
        lock = threading.Lock()
        nonce = secrets.token_hex(16)
        if not node_agent.send(sock, lock, {"nonce": nonce}):
            return None
        hello = reader.read(HANDSHAKE_SECONDS, HELLO_BYTES)
        if not hello:
            return None
        expected = node_agent.proof(self.secret, "agent", nonce)
        if not hmac.compare_digest(str(hello.get("proof", "")), expected):
            return None
        partition = hello.get("partition")
        if not isinstance(partition, int) or not 0 <= partition < len(self.tasks):
            return None
        name = self.tasks[partition]
        with self.cond:
            old = self.links.get(name)
            if old is not None and old.alive and not old.closing:
                return None  # one live agent per task (a closing one's stage is ending)
            port = self.ports.get(name, 0)
            if self.any_port_elsewhere and old is not None and (
                    old.closing or old.info.get("host") != hello.get("host")):
                port = 0  # another host, or the driver ended the old agent: it may hold the port still
        theirs = str(hello.get("nonce", ""))
        if not node_agent.send(sock, lock, {"proof": node_agent.proof(self.secret, "driver", theirs),
                                             "port": port}):
            return None
        held = reader.read(HANDSHAKE_SECONDS + 20)
        if not held:
            return None
        info = {k: v for k, v in hello.items() if k not in ("proof", "nonce")}
        if "held" in held:
            info["port"] = int(held["held"])
        else:
            info["error"] = str(held.get("error", "no port"))[:500]
        return AgentLink(name, sock, info)

    def _serve(self, sock: socket.socket) -> None:
        reader = node_agent.LineReader(sock)
        try:
            link = self._handshake(sock, reader)
        except (OSError, ValueError, TypeError):
            link = None
        if link is None:
            with contextlib.suppress(OSError):
                sock.close()
            return
        with self.cond:
            if self._closed:
                link.close()
                return
            replaced = self.links.get(link.name)
            self.links[link.name] = link
            if "port" in link.info:
                if self.any_port_elsewhere:
                    self.ports[link.name] = link.info["port"]
                else:
                    self.ports.setdefault(link.name, link.info["port"])
            self.cond.notify_all()
        if replaced is not None:
            replaced.close()  # an agent of the stage that ended (e.g. on a host cut off)
        beating = threading.Event()
        beat = (beating, sock, link.lock, {"op": "beat"}, self.beat)
        threading.Thread(target=node_agent.beat_until, args=beat, name="spark-beat", daemon=True).start()
        while True:
            msg = reader.read(self.silence)
            if msg is None:
                break
            if msg.get("ev") != "beat":
                self._on_message(link.name, msg)
        beating.set()
        with self.cond:
            link.alive = False
            link.ended = f"silent for {self.silence:g}s" if reader.silent else "closed"
            self.cond.notify_all()
        if reader.silent:
            with contextlib.suppress(OSError):
                sock.close()  # the agent, should it hear again, finds the connection gone
        if not link.closing:
            self._on_message(link.name, None)

    def wait(self, names: list[str], timeout: float, stop: Callable[[], str | None]) -> str | None:
        """Wait until every named task has a live agent that is not closing; returns None,
        or why not (``stop()`` says why the wait is over early, e.g. the stage failed)."""
        import time

        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                # a closing agent's stage is ending: it takes no new attempt
                missing = [n for n in names if n not in self.links or not self.links[n].alive
                           or self.links[n].closing]
                if not missing:
                    return None
                why = stop()
                if why:
                    return why
                left = deadline - time.monotonic()
                if left <= 0:
                    return f"no agent for {', '.join(missing)} within {timeout:g}s"
                self.cond.wait(min(left, 0.5))

    def wait_gone(self, names: list[str], timeout: float) -> None:
        """Wait (at most ``timeout`` s) until none of these tasks has a live agent."""
        import time

        deadline = time.monotonic() + timeout
        with self.cond:
            while any(n in self.links and self.links[n].alive for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cond.wait(min(left, 0.5))

    def link(self, name: str) -> AgentLink | None:
        with self.cond:
            return self.links.get(name)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.server.close()
        with self.cond:
            links = list(self.links.values())
        for link in links:
            link.send({"op": "shutdown"})
            link.close()

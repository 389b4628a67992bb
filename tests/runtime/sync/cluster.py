"""A loopback ParameterServerStrategy cluster for the sync tests and benchmarks/sync_backup.py.

``LocalCluster(workers=2, ps=1)`` starts each worker and ps task as a subprocess running
``tf.distribute.Server(...).join()`` on 127.0.0.1 and gives the chief's ``TF_CONFIG``;
the calling process (or a chief subprocess it starts) is the coordinator. Ports are held
with ``SO_REUSEPORT`` until the tasks bind them (``TF_GRPC_REUSE_PORT=1``), so no other
process can take them in between. No TensorFlow is imported here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SERVER_CODE = """
import os, sys
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import tensorflow as tf
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.distribute.Server(r.cluster_spec(), job_name=r.task_type, task_index=r.task_id,
                              protocol="grpc", start=True)
print("TFDIST_SERVER_READY", flush=True)
server.join()
"""


class LocalCluster:
    """Chief slot + ``workers`` workers + ``ps`` ps tasks on 127.0.0.1."""

    def __init__(self, workers: int = 2, ps: int = 1, *, log_dir: str | None = None):
        self.num_workers = workers
        self.num_ps = ps
        self._socks: list[socket.socket] = []
        self.cluster = {
            "chief": [self._reserve()],
            "worker": [self._reserve() for _ in range(workers)],
            "ps": [self._reserve() for _ in range(ps)],
        }
        self._own_log_dir = log_dir is None  # a directory it made is removed by stop()
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="tfdist-sync-"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _reserve(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("0.0.0.0", 0))
        self._socks.append(sock)
        return f"127.0.0.1:{sock.getsockname()[1]}"

    def tf_config(self, role: str, index: int = 0) -> str:
        return json.dumps({"cluster": self.cluster, "task": {"type": role, "index": index}})

    def env(self, role: str, index: int = 0, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            TF_CONFIG=self.tf_config(role, index),
            TF_GRPC_REUSE_PORT="1",
            TF_USE_LEGACY_KERAS="1",
            TF_CPP_MIN_LOG_LEVEL="2",
            PYTHONUNBUFFERED="1",
            TFDIST_TASK=f"{role}-{index}",
        )
        env.update(extra or {})
        return env

    def start(self) -> LocalCluster:
        for role in ("ps", "worker"):
            for i in range(len(self.cluster[role])):
                self.start_task(role, i)
        return self

    def start_task(self, role: str, index: int) -> subprocess.Popen[bytes]:
        name = f"{role}-{index}"
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER_CODE],
            env=self.env(role, index),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)
            proc.wait(10)

    def stop(self) -> None:
        for name in list(self.procs):
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for sock in self._socks:
            sock.close()
        self._socks.clear()
        if self._own_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def run_chief(
        self, argv: list[str], *, timeout: float = 240, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the coordinator program as a subprocess with the chief's TF_CONFIG."""
        return subprocess.run(
            argv,
            env=self.env("chief", 0, extra_env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def last_json(text: str) -> Any:
    """The JSON object on the last line of ``text`` that parses (chief programs' result)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise ValueError("no JSON line in the output:\n" + text[-2000:])

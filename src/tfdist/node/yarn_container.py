"""tfdist's agent in a YARN container (the yarn backend ships it; standard library only).

The distributed shell starts it in every container of a role's application. It finds which
task it is (the role's first task plus the container's ``YARN_SHELL_ID``, which the
distributed shell numbers from 1 and keeps when it relaunches a container in place; a
replacement for a container lost with its node is numbered past the role's count and claims
whichever of the role's tasks has no live agent: see :func:`candidates`), reads
the job's secret from the container's YARN credentials (never from the environment), and
then is exactly the Spark agent (:func:`tfdist.backends.node_agent.run_agent`): it connects
back to tfdist, holds the task's port, runs and restarts the task on command, streams output
and exits, and kills the task when tfdist says so or its connection drops.

Exit status: 0 when tfdist ended it or is gone (the container must not be relaunched), 1 when
it could not start; a container killed from outside ends non-zero and the distributed shell
relaunches it, so the task gets a new agent on the same node.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import sys
import tarfile
import time
from collections.abc import Mapping
from typing import Any

from tfdist.node import agent as node_agent
from tfdist.node import protowire

SECRET_ALIAS = b"tfdist.secret"


def _hadoop_vint(data: bytes, pos: int) -> tuple[int, int]:
    """Hadoop's ``WritableUtils.readVInt``."""
    first = int.from_bytes(data[pos:pos + 1], "big", signed=True)
    pos += 1
    if first >= -112:
        return first, pos
    negative = first < -120
    size = -(first + 120) if negative else -(first + 112)
    value = int.from_bytes(data[pos:pos + size - 1], "big")
    return (~value if negative else value), pos + size - 1


def _writable_secrets(data: bytes) -> dict[bytes, bytes]:
    def chunk(pos: int) -> tuple[bytes, int]:
        size, pos = _hadoop_vint(data, pos)
        return data[pos:pos + size], pos + size

    pos = 0
    tokens, pos = _hadoop_vint(data, pos)
    for _ in range(tokens):  # alias, identifier, password, kind, service
        for _field in range(5):
            _, pos = chunk(pos)
    count, pos = _hadoop_vint(data, pos)
    found = {}
    for _ in range(count):
        alias, pos = chunk(pos)
        found[alias], pos = chunk(pos)
    return found


def credential_secrets(data: bytes) -> dict[bytes, bytes]:
    """The secret keys of a Hadoop credentials file (``HDTS``, writable or protobuf form)."""
    if data[:4] != b"HDTS" or len(data) < 5:
        raise ValueError("not a Hadoop credentials file")
    version, body = data[4], data[5:]
    if version == 0:
        return _writable_secrets(body)
    if version == 1:
        size, pos = protowire.read_varint(body, 0)  # written delimited
        found = {}
        for entry in protowire.blobs(protowire.parse(body[pos:pos + size]), 2):
            kv = protowire.parse(entry)  # CredentialsProto.secrets: {alias = 1, secret = 3}
            found[protowire.blob(kv, 1)] = protowire.blob(kv, 3)
        return found
    raise ValueError(f"credentials format {version}")


def job_secret(environ: Mapping[str, str]) -> str:
    path = environ.get("HADOOP_TOKEN_FILE_LOCATION")
    if not path:
        raise ValueError("HADOOP_TOKEN_FILE_LOCATION is not set")
    with open(path, "rb") as f:
        secrets = credential_secrets(f.read(1 << 20))
    if SECRET_ALIAS not in secrets:
        raise ValueError("the container's credentials hold no tfdist secret")
    return secrets[SECRET_ALIAS].decode()  # the RM decoded the base64 of the REST submission


def candidates(tasks: list[dict[str, Any]], role: str, shell_id: str) -> list[int]:
    """The indexes in ``tasks`` of the tasks this container may run. The distributed shell
    numbers a role's containers from 1 and keeps the number when it relaunches one in place,
    so container N runs the role's task N-1. A container it asks for because one was lost
    with its node (a replacement, numbered past the role's count) runs whichever of the
    role's tasks has no live agent: it may claim each in turn."""
    first = next(i for i, t in enumerate(tasks) if t["role"] == role)
    count = sum(1 for t in tasks if t["role"] == role)
    index = int(shell_id) - 1
    if index < 0:
        raise ValueError(f"container {shell_id} of {role} has no task (the role has {count})")
    return [first + index] if index < count else list(range(first, first + count))


#: How long a container keeps claiming a task the driver refuses (its old agent, on a node
#: that is going, may still look alive for a moment), seconds between passes.
CLAIM_SECONDS, CLAIM_PAUSE = 120.0, 2.0


#: Where the shipped working directory is unpacked, in the container's own directory.
WORKDIR = "tfdist-workdir"


class WorkdirReceiver(node_agent.Receiver):
    """The job's working directory as tfdist sends it over the channel: base64 chunks of one
    ``.tar.gz`` (``put`` messages, the last with ``end``), written beside ``dest`` and
    unpacked into ``dest`` once the bytes match the size and SHA-256 the job names (those
    came with the job from the RM, not over the channel). A relaunched container unpacks
    afresh. A failure leaves no ``dest``: the task then cannot start there, and says so."""

    def __init__(self, dest: str, sha256: str, size: int) -> None:
        import hashlib

        self.dest, self.sha256, self.size = dest, sha256, size
        self.part = dest + ".tar.gz.part"
        self._hash = hashlib.sha256()
        self._got = -1  # -1: no archive under way

    def put(self, message: dict[str, Any]) -> None:
        import hashlib

        if self._got < 0:  # a new archive (a relaunched container unpacks afresh)
            self._remove()
            self._hash, self._got = hashlib.sha256(), 0
        data = base64.b64decode(str(message.get("data", "")))
        self._got += len(data)
        if self._got <= self.size:
            self._hash.update(data)
            with open(self.part, "ab") as f:
                f.write(data)
        if not message.get("end"):
            return
        try:
            self._unpack()
        except (OSError, ValueError, EOFError, tarfile.TarError) as err:
            self._remove()
            print(f"tfdist agent: the working directory did not arrive whole: {err}",
                  file=sys.stderr, flush=True)
        finally:
            self._got = -1
            with contextlib.suppress(OSError):
                os.remove(self.part)

    def _unpack(self) -> None:
        if self._got != self.size or self._hash.hexdigest() != self.sha256:
            raise ValueError(f"got {self._got} bytes, SHA-256 {self._hash.hexdigest()[:12]}; "
                             f"the job names {self.size} bytes, {self.sha256[:12]}")
        os.makedirs(self.dest)  # even when the workdir shipped no file: the task starts here
        with tarfile.open(self.part, "r:gz") as tar:
            if hasattr(tarfile, "data_filter"):  # no absolute paths, no '..', no devices
                tar.extractall(self.dest, filter="data")
            else:  # an older Python: refuse what data_filter would
                for member in tar.getmembers():
                    if member.name.startswith("/") or ".." in member.name.split("/") or not (
                            member.isfile() or member.isdir() or member.issym()):
                        raise ValueError(f"refused archive member {member.name[:100]!r}")
                tar.extractall(self.dest)

    def _remove(self) -> None:
        import shutil

        shutil.rmtree(self.dest, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.remove(self.part)


def main(environ: Mapping[str, str]) -> int:
    try:
        job = json.loads(base64.b64decode(environ["TFDIST_YARN_JOB"]))
        tasks = job["tasks"]
        mine = candidates(tasks, job["role"], environ.get("YARN_SHELL_ID", ""))
        secret = job_secret(environ)
    except (KeyError, ValueError, OSError, StopIteration) as err:
        print(f"tfdist agent: cannot start: {err}", file=sys.stderr, flush=True)
        return 1
    cwd, receiver = tasks[mine[0]]["cwd"], None
    shipped = job.get("workdir")  # {"sha256": ..., "size": ...}: tfdist sends it
    if isinstance(shipped, dict):
        cwd = os.path.abspath(WORKDIR)
        receiver = WorkdirReceiver(cwd, str(shipped.get("sha256")), int(shipped.get("size", 0)))
    facts = {
        "hostname": socket.gethostname(),
        "executor": environ.get("CONTAINER_ID", ""),
        "container": environ.get("CONTAINER_ID", ""),
        "node_http": f"{environ.get('NM_HOST', '')}:{environ.get('NM_HTTP_PORT', '')}",
        "node": f"{environ.get('NM_HOST', '')}:{environ.get('NM_PORT', '')}",  # the RM's node id
        "pid": os.getpid(),
        "python": sys.executable,
        "cwd": cwd,
    }
    deadline = time.monotonic() + CLAIM_SECONDS
    while True:
        for index in mine:
            try:
                ended = node_agent.run_agent(tuple(job["driver"]), secret, job["token"], tasks, index,
                                              cwd, facts, receiver)
            except node_agent.Refused as err:
                print(f"tfdist agent: {err}", file=sys.stderr, flush=True)
                continue
            except OSError as err:
                print(f"tfdist agent: tfdist at {job['driver']} is gone: {err}", file=sys.stderr, flush=True)
                return 0
            print(f"tfdist agent: {ended}", file=sys.stderr, flush=True)
            return 0
        if time.monotonic() > deadline:
            print(f"tfdist agent: no task of {job['role']} to take within {CLAIM_SECONDS:g}s",
                  file=sys.stderr, flush=True)
            return 0
        time.sleep(CLAIM_PAUSE)

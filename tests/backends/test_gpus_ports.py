"""GPU assignment on a faked device list, and ports that nobody else can take."""

from __future__ import annotations

import errno
import socket

import pytest

from tfdist.backends.gpus import assign_gpus, visible_gpus
from tfdist.errors import SpecError
from tfdist.node.procs import PortHolder


def test_visible_gpus_from_env() -> None:
    assert visible_gpus({"TFDIST_GPUS": "0,1, 2"}) == ["0", "1", "2"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}) == ["3", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert visible_gpus({"TFDIST_GPUS": ""}) == []


def test_each_task_gets_its_own_cards() -> None:
    got = assign_gpus([("chief-0", 1), ("worker-0", 2), ("ps-0", 0)], ["0", "1", "2", "3"])
    assert got == {"chief-0": ["0"], "worker-0": ["1", "2"], "ps-0": []}


def test_too_few_gpus_is_refused_clearly() -> None:
    with pytest.raises(SpecError, match="asks for 3 GPUs .* but 2 are visible"):
        assign_gpus([("worker-0", 2), ("worker-1", 1)], ["0", "1"])


def test_held_port_cannot_be_bound_by_others_but_can_with_reuseport() -> None:
    with PortHolder() as holder:
        port = holder.reserve()
        plain = socket.socket()
        with pytest.raises(OSError) as err:
            plain.bind(("127.0.0.1", port))
        assert err.value.errno == errno.EADDRINUSE
        plain.close()
        reuser = socket.socket()
        reuser.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        reuser.bind(("0.0.0.0", port))  # what TensorFlow does with TF_GRPC_REUSE_PORT=1
        reuser.listen()
        client = socket.create_connection(("127.0.0.1", port), timeout=2)
        conn, _ = reuser.accept()  # the connection reaches the task, not the holder
        client.close()  # the client closes first, so TIME_WAIT stays on its side...
        conn.settimeout(5)
        assert conn.recv(1) == b""  # ...once its FIN has arrived here
        conn.close()
        reuser.close()
    free = socket.socket()
    free.bind(("127.0.0.1", port))  # released after close()
    free.close()


def test_command_lookup_uses_the_roles_own_path(tmp_path) -> None:
    """A role's env.PATH is where its program is looked for, before anything starts."""
    from tfdist.backends.local import LocalBackend
    from tfdist.jobspec import load

    tool = tmp_path / "bin" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    data = {"name": "p", "workdir": str(tmp_path), "command": ["mytool"],
            "roles": {"worker": {"replicas": 1, "env": {"PATH": f"{tool.parent}:/usr/bin:/bin"}}}}
    backend = LocalBackend(load.from_dict(data))
    try:
        backend.check()
    finally:
        backend.close()
    del data["roles"]["worker"]["env"]
    backend = LocalBackend(load.from_dict(data))
    try:
        with pytest.raises(SpecError, match="roles.worker.command: 'mytool' was not found"):
            backend.check()
    finally:
        backend.close()

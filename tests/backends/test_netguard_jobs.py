"""A local job's TensorFlow ports cannot be reached from another host (issue 11, section 1).

From this machine, a task port is probed on the machine's own non-loopback address (which is
what another host would reach): it must refuse, while loopback works and the job trains.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import BIN, TFDIST, tfdist

pytestmark = pytest.mark.integration


def own_addresses() -> list[str]:
    """This machine's non-loopback, non-link-local addresses (one per family at most)."""
    found: dict[int, str] = {}
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family not in (socket.AF_INET, socket.AF_INET6) or a.family in found:
                continue
            ip = ipaddress.ip_address(a.address.split("%")[0])
            if not (ip.is_loopback or ip.is_link_local):
                found[a.family] = str(ip)
    return list(found.values())


def connects(host: str, port: int) -> bool | str:
    """True if a TCP connection opens; False if it is refused; the error otherwise."""
    try:
        socket.create_connection((host, port), timeout=5).close()
    except ConnectionRefusedError:
        return False
    except OSError as err:
        return str(err)
    return True


def start_job(tmp_path: Path, probe: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [*TFDIST, "run", "--quiet", "--json", "--runs-dir", str(tmp_path / "runs"),
           "--env", f"PROBE_DIR={probe}", *args, "--", "python", str(BIN / "serve_probe.py")]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def wait_ports(job: subprocess.Popen, probe: Path, tasks: list[str]) -> dict[str, int]:
    deadline = time.monotonic() + 180
    while not all((probe / f"{t}.port").exists() for t in tasks):
        if job.poll() is not None or time.monotonic() > deadline:
            job.kill()
            out, err = job.communicate()
            pytest.fail(f"tasks never served (rc={job.returncode}): {out[-2000:]} {err[-2000:]}")
        time.sleep(0.1)
    return {t: int((probe / f"{t}.port").read_text()) for t in tasks}


def finish(job: subprocess.Popen, probe: Path) -> tuple[dict, str]:
    """Let the tasks go on; the job's JSON summary and its stderr."""
    (probe / "go").touch()
    out, err = job.communicate(timeout=180)
    assert job.returncode == 0, f"{out[-2000:]} {err[-2000:]}"
    return json.loads(out), err


@pytest.fixture
def addresses() -> list[str]:
    found = own_addresses()
    if not found:
        pytest.skip("this machine has no non-loopback address to probe from")
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="task ports are kept on loopback only on Linux")
def test_task_ports_refuse_the_network_while_the_job_trains(tmp_path: Path, addresses: list[str]) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    job = start_job(tmp_path, probe, "--workers", "2", "--strategy", "multi_worker_mirrored")
    ports = wait_ports(job, probe, ["worker-0", "worker-1"])
    seen = {(task, host): connects(host, port) for task, port in ports.items()
            for host in [*addresses, "127.0.0.1"]}
    result, err = finish(job, probe)
    assert seen == {(t, h): h == "127.0.0.1" for t in ports for h in [*addresses, "127.0.0.1"]}
    assert "reachable from the network" not in err
    logs = Path(result["run_dir"]) / "logs"
    for task in ports:  # the all-reduce ran through the loopback-only servers
        assert "trained steps=5 sum=10.0" in (logs / f"{task}.log").read_text()


def test_opting_out_leaves_the_port_open(tmp_path: Path, addresses: list[str]) -> None:
    """The probe above can fail: with the guard off the same port answers on the network."""
    probe = tmp_path / "probe"
    probe.mkdir()
    job = start_job(tmp_path, probe, "--workers", "1", "--strategy", "none",
                    env={"TFDIST_EXPOSE_PORTS": "1"})
    (port,) = wait_ports(job, probe, ["worker-0"]).values()
    reached = connects(addresses[0], port)
    finish(job, probe)
    assert reached is True


#: The CLI of an installation whose install-time build of the interposer did not run.
NOT_BUILT_AT_INSTALL = [sys.executable, "-c", (
    "import runpy; from pathlib import Path; from tfdist.backends import netguard; "
    "netguard.PACKAGED = Path('/nonexistent/loopback-bind.so'); "
    "runpy.run_module('tfdist.cli', run_name='__main__', alter_sys=True)")]


def test_a_port_that_cannot_be_closed_is_said_once_and_the_job_runs(tmp_path: Path) -> None:
    env = {**os.environ, "CC": "/nonexistent/cc", "TFDIST_HOME": str(tmp_path / "home")}  # nothing cached there
    proc = subprocess.run([*NOT_BUILT_AT_INSTALL, "run", "--runs-dir", str(tmp_path / "runs"), "--workers", "2",
                           "--", "python", str(BIN / "ok.py")], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "reachable from the network" in ln]
    assert len(warnings) == 1 and "CC (/nonexistent/cc)" in warnings[0]


def test_a_bad_opt_out_value_is_bad_input(tmp_path: Path) -> None:
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--",
                  "python", str(BIN / "ok.py"), env={"TFDIST_EXPOSE_PORTS": "sometimes"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "tfdist: error: TFDIST_EXPOSE_PORTS: expected 1 or 0 (got 'sometimes'); "
        "1 leaves task ports open to the network"]
    assert not (tmp_path / "runs").exists()

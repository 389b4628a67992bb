"""The local backend's security claim, checked from another host: a local job on h1 trains
while its task ports refuse a connection from h2 to h1's bridge address (the claim's own
test in tests/backends/test_netguard_jobs.py can only probe the machine from itself)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, TFDIST

pytestmark = [pytest.mark.hosts, pytest.mark.integration]


def reach(bed, host, address: str, port: int) -> bool | str:
    """True if a TCP connection from ``host`` opens, False if refused, else the error."""
    try:
        bed.connect(host, (address, port), timeout=5).close()
    except ConnectionRefusedError:
        return False
    except OSError as err:
        return str(err)
    return True


def serve(bed, tmp_path: Path, name: str, args: list[str], env: dict[str, str] | None = None):
    """A local job of tests/bin/serve_probe.py run on h1; returns (its Popen, ports by task)."""
    probe = tmp_path / name
    probe.mkdir()
    job = bed.run(bed.host("h1"), [*TFDIST, "run", "--quiet", "--json", "--runs-dir", str(tmp_path / "runs"),
                                   "--name", name, "--env", f"PROBE_DIR={probe}", *args, "--", "python",
                                   str(BIN / "serve_probe.py")],
                  env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tasks = [f"worker-{i}" for i in range(int(args[args.index("--workers") + 1]))]
    deadline = time.monotonic() + 180
    while not all((probe / f"{t}.port").exists() for t in tasks):
        if job.poll() is not None or time.monotonic() > deadline:
            job.kill()
            out, err = job.communicate()
            pytest.fail(f"tasks never served (rc={job.returncode}): {out[-2000:]} {err[-2000:]}")
        time.sleep(0.1)
    return job, probe, {t: int((probe / f"{t}.port").read_text()) for t in tasks}


def done(job, probe: Path) -> dict:
    (probe / "go").touch()
    out, err = job.communicate(timeout=180)
    assert job.returncode == 0, f"{out[-2000:]} {err[-2000:]}"
    return json.loads(out)


def test_a_local_jobs_ports_refuse_another_host_while_it_trains(host_bed, tmp_path: Path) -> None:
    h1, h2 = host_bed.host("h1"), host_bed.host("h2")
    job, probe, ports = serve(host_bed, tmp_path, "guarded", ["--workers", "2", "--strategy", "multi_worker_mirrored"])
    seen = {task: (reach(host_bed, h2, h1.address, port), reach(host_bed, h1, "127.0.0.1", port))
            for task, port in ports.items()}
    result = done(job, probe)
    assert seen == {task: (False, True) for task in ports}  # refused from h2; h1's own loopback reaches it
    for task in ports:  # and the all-reduce ran through those loopback-only servers
        assert "trained steps=5 sum=10.0" in (Path(result["run_dir"]) / "logs" / f"{task}.log").read_text()

    # the probe can fail: with the guard off, h2 reaches the same kind of port
    job, probe, ports = serve(host_bed, tmp_path, "exposed", ["--workers", "1", "--strategy", "none"],
                              env={"TFDIST_EXPOSE_PORTS": "1"})
    reached = reach(host_bed, h2, h1.address, ports["worker-0"])
    done(job, probe)
    assert reached is True
    assert host_bed.pids(h1) == []

"""Start a small TensorFlow cluster on 127.0.0.1 by hand (no launcher) for tests.

Builds each task's environment like tfdist.cluster.task_env, starts one process per
task, waits for the ones that finish by themselves and stops the servers (ps, PSS
workers) with SIGTERM, as a launcher would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tfdist.runtime.progress import parse_line

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Result:
    name: str
    returncode: int
    output: str

    @property
    def reports(self) -> list[dict]:
        return [r for r in map(parse_line, self.output.splitlines()) if r is not None]


def task_envs(
    roles: dict[str, int], strategy: str, run_dir: Path, options: dict | None = None
) -> dict[str, dict[str, str]]:
    """Environment of every task: TF_CONFIG on loopback ports plus the TFDIST_* variables."""
    training = [r for r in ("chief", "worker", "ps") if roles.get(r)]
    ports = iter(free_ports(sum(roles.get(r, 0) for r in training)))
    cluster = {r: [f"127.0.0.1:{next(ports)}" for _ in range(roles[r])] for r in training}
    envs = {}
    for role in ("chief", "worker", "ps", "evaluator"):
        for i in range(roles.get(role, 0)):
            env = dict(os.environ)
            env.update(
                TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": role, "index": i}}),
                TFDIST_JOB_NAME="test",
                TFDIST_TASK=f"{role}-{i}",
                TFDIST_RESTART_COUNT="0",
                TFDIST_RUN_DIR=str(run_dir),
                TFDIST_STRATEGY=strategy,
                TFDIST_OPTIONS=json.dumps(options or {}),
                TF_USE_LEGACY_KERAS="1",
                TF_CPP_MIN_LOG_LEVEL="2",
                PYTHONUNBUFFERED="1",
                PYTHONPATH=str(ROOT / "src"),
            )
            envs[f"{role}-{i}"] = env
    return envs


def run_cluster(
    command: list[str],
    roles: dict[str, int],
    strategy: str,
    run_dir: Path,
    *,
    cwd: Path,
    options: dict | None = None,
    timeout: float = 240,
    tmpdir: Path | None = None,
) -> dict[str, Result]:
    """Run every task; servers are stopped once all other tasks have exited."""
    envs = task_envs(roles, strategy, run_dir, options)
    procs = {}
    logs = {}
    for name, env in envs.items():
        if tmpdir is not None:
            env["TMPDIR"] = str(tmpdir)
        logs[name] = open(run_dir / f"{name}.log", "w+")  # noqa: SIM115
        procs[name] = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=logs[name],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    servers = {n for n in procs if strategy == "parameter_server" and n.split("-")[0] in ("ps", "worker")}
    deadline = time.monotonic() + timeout
    try:
        for name, proc in procs.items():
            if name not in servers:
                proc.wait(timeout=max(1, deadline - time.monotonic()))
        for name in servers:
            procs[name].send_signal(signal.SIGTERM)
        for name in servers:
            procs[name].wait(timeout=20)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    results = {}
    for name, f in logs.items():
        f.seek(0)
        results[name] = Result(name, procs[name].returncode, f.read())
        f.close()
    return results


if __name__ == "__main__":  # manual use: launch.py STRATEGY chief=1,worker=2 RUN_DIR -- cmd
    strategy, spec, run_dir = sys.argv[1:4]
    roles = {k: int(v) for k, v in (p.split("=") for p in spec.split(","))}
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    out = run_cluster(cmd, roles, strategy, Path(run_dir), cwd=Path.cwd())
    for name, r in out.items():
        print(f"===== {name} rc={r.returncode}")
        print("\n".join(r.output.splitlines()[-15:]))
    print(f"{time.monotonic() - t0:.1f}s")

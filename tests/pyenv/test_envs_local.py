"""Per-job Python environments on the local backend, with real installs from the package
index (tiny pure-Python packages): conflicting pins side by side, reuse without a build, two
concurrent submits building once, a failed resolution leaving nothing, env list and clean."""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import BIN, TFDIST, tfdist

pytestmark = [pytest.mark.integration, pytest.mark.network, pytest.mark.usefixtures("package_index")]


def envs_dir() -> Path:
    return Path(os.environ["TFDIST_HOME"]) / "envs"


def built() -> list[Path]:
    return sorted(p for p in envs_dir().iterdir() if p.is_dir()) if envs_dir().exists() else []


def job_file(tmp_path: Path, name: str, pins: list[str], *args: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    command = ["python", str(BIN / "print_version.py"), *args]
    path.write_text(json.dumps({"name": name, "strategy": "none", "command": command, "roles": {"worker": 1},
                                "python": {"requirements": pins}}))
    return path


def versions(run_dir: Path) -> list[str]:
    log = (run_dir / "logs" / "worker-0.log").read_text()
    return [ln.split()[2] for ln in log.splitlines() if ln.startswith("VERSION ")]


def test_conflicting_pins_run_side_by_side_and_the_cache_is_reused(tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = {}
    for me, other, pin in (("a", "b", "six==1.16.0"), ("b", "a", "six==1.15.0")):
        path = job_file(tmp_path, f"six-{me}", [pin], "six", str(barrier), me, other)
        procs[me] = subprocess.Popen(
            [*TFDIST, "run", str(path), "--runs-dir", str(tmp_path / "runs"), "--run-dir", str(tmp_path / me), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
    outs = {me: p.communicate(timeout=300) for me, p in procs.items()}
    for me, p in procs.items():
        assert p.returncode == 0, outs[me]
        assert "building the Python environment" in outs[me][1]
    # each saw its own pin, from its own environment, while the other job was running
    assert versions(tmp_path / "a") == ["1.16.0"] and versions(tmp_path / "b") == ["1.15.0"]
    assert "saw b running" in (tmp_path / "a" / "logs" / "worker-0.log").read_text()
    assert len(built()) == 2
    meta = {p.name: json.loads((p / "tfdist-env.json").read_text()) for p in built()}

    # the same requirements again: no build, the same environment, untouched
    again = tfdist("run", str(job_file(tmp_path, "six-c", ["six==1.16.0"], "six")),
                   "--runs-dir", str(tmp_path / "runs"), "--run-dir", str(tmp_path / "c"), "--quiet")
    assert again.returncode == 0, again.stderr
    assert "reusing the Python environment" in again.stderr and "building" not in again.stderr
    assert versions(tmp_path / "c") == ["1.16.0"]
    assert {p.name: json.loads((p / "tfdist-env.json").read_text()) for p in built()} == meta

    listed = {e["requirements"][0]: e for e in json.loads(tfdist("env", "list", "--json").stdout)}
    assert set(listed) == {"six==1.16.0", "six==1.15.0"}
    assert listed["six==1.16.0"]["jobs"] == ["a", "c"]  # the run ids (their --run-dir names)
    assert all(e["complete"] and e["size"] > 0 and e["running"] == 0 for e in listed.values())


def test_concurrent_submits_build_once(tmp_path: Path) -> None:
    import tfdist.api as api

    path = job_file(tmp_path, "idna", ["idna==3.6"], "idna")

    def submit(_: int) -> subprocess.CompletedProcess:
        return tfdist("submit", str(path), "--runs-dir", str(tmp_path / "runs"))

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(submit, range(2)))
    for r in results:
        assert r.returncode == 0, r.stderr
    stderr = "".join(r.stderr for r in results)
    assert stderr.count("building the Python environment") == 1, stderr
    assert stderr.count("reusing the Python environment") == 1, stderr
    assert len(built()) == 1
    for r in results:
        final = api.handle(r.stdout.strip().splitlines()[-1]).wait(timeout=120)
        assert final["state"] == "succeeded", final
        assert versions(Path(final["run_dir"])) == ["3.6"]
        supervisor = (Path(final["run_dir"]) / "supervisor.log").read_text()
        assert "reusing the Python environment" in supervisor and "building" not in supervisor


def test_failed_resolution_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    path = job_file(tmp_path, "bad", ["six==99.0.0"], "six")
    proc = tfdist("run", str(path), "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot build the job's environment: No solution found" in proc.stderr
    assert "six==99.0.0" in proc.stderr
    assert not envs_dir().exists() and not (tmp_path / "runs").exists()  # not even a lock file


def test_env_clean_keeps_an_environment_in_use(tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    path = job_file(tmp_path, "held", ["six==1.16.0"], "six", str(barrier), "me", "go")
    job = subprocess.Popen([*TFDIST, "run", str(path), "--runs-dir", str(tmp_path / "runs"), "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (barrier / "me").exists():  # the task runs, so the job is using its env
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.1)
        listed = json.loads(tfdist("env", "list", "--json").stdout)
        assert [e["running"] for e in listed] == [1]
        clean = tfdist("env", "clean", "--unused")
        assert clean.returncode == 0 and "kept" in clean.stdout and "in use by a running job" in clean.stdout
        assert len(built()) == 1
    finally:
        (barrier / "go").touch()
        job.communicate(timeout=60)
    assert job.returncode == 0
    clean = tfdist("env", "clean", "--unused")
    assert clean.returncode == 0 and "removed" in clean.stdout, clean.stdout
    assert built() == []


def test_without_uv_venv_and_pip_build_it(tmp_path: Path) -> None:
    path = job_file(tmp_path, "pip", ["six==1.15.0"], "six")
    proc = tfdist("run", str(path), "--runs-dir", str(tmp_path / "runs"), "--run-dir", str(tmp_path / "r"),
                  "--quiet", env={"TFDIST_ENV_TOOL": "pip"})
    assert proc.returncode == 0, proc.stderr
    assert "(1 requirement(s), pip)" in proc.stderr
    assert versions(tmp_path / "r") == ["1.15.0"]
    [env] = built()
    assert json.loads((env / "tfdist-env.json").read_text())["tool"] == "pip"
    assert "six==1.15.0" in (env / "requirements.lock").read_text()
    listed = tfdist("env", "list").stdout
    assert env.name in listed and "six==1.15.0" in listed and "jobs: r" in listed, listed
    bad = tfdist("run", str(job_file(tmp_path, "pipbad", ["six==99.0.0"], "six")), "--runs-dir", str(tmp_path / "runs"),
                 env={"TFDIST_ENV_TOOL": "pip"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "No matching distribution found for six==99.0.0" in bad.stderr
    assert built() == [env]

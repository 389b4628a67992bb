"""Bad input through the real CLI: one line on stderr, exit code 2, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("name: a\nroles: {worker: 1}\ncommand: [python, x.py]\nroels: 1\n", "did you mean 'roles'"),
        ("name: a\nroles: {worker: 1\n", "malformed YAML"),
        ("name: a\nroles: {worker: {replicas: -2}}\ncommand: [python]\n", "roles.worker.replicas"),
        ("name: a\nroles: {chief: 2}\ncommand: [python]\n", "at most one chief"),
        ("name: a\nstrategy: parameter_server\nroles: {worker: 2}\ncommand: [python]\n", "at least one ps"),
        ("name: a\nroles: {worker: 1}\ncommand: [no-such-program-xyz]\n", "'no-such-program-xyz' was not found"),
        ("name: a\nroles: {worker: 1}\ncommand: [./missing.sh]\n", "'./missing.sh' was not found"),
        ("name: a\nroles: {worker: 1}\ncommand: [python]\nworkdir: nowhere\n", "workdir:"),
    ],
)
def test_bad_job_file(tmp_path: Path, body: str, expected: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(body)
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), str(job))
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run"], "give a job file"),
        (["run", "--workers", "x", "--", "python"], "invalid int value"),
        (["run", "--strategy", "nope", "--", "python"], "strategy"),
        (["run", "--backend", "mars", "--workers", "1", "--", "python"], "unknown backend 'mars'"),
        (["run", "job.yaml", "--", "python"], "not both"),
        (["run", "--workers", "1", "--", "no-such-program-xyz"], "was not found"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_command_line(tmp_path: Path, args: list[str], expected: str) -> None:
    proc = tfdist(*args, "--runs-dir", str(tmp_path / "runs")) if args[0] == "run" and "--" not in args else \
        tfdist(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "tfdist-runs").exists()


def test_ok_program_runs(tmp_path: Path) -> None:
    proc = tfdist("run", "-q", "--runs-dir", str(tmp_path), "--workers", "1", "--", "python", str(BIN / "ok.py"))
    assert proc.returncode == 0

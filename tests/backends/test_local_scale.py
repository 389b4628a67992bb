"""A thousand local tasks: no "too many open files", no thread exhaustion, a readable summary;
and limits that cannot hold the job are refused before anything starts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TFDIST

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, n: int, limits: str = "", *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = " ".join([*TFDIST, "run", "-q", *extra, "--runs-dir", str(tmp_path / "runs"), "--workers", str(n),
                    "--strategy", "none", "--", "true"])
    return subprocess.run(["bash", "-c", f"{limits}exec {cmd}"], capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(600)
def test_a_thousand_no_op_tasks_succeed_with_a_grouped_summary(tmp_path: Path) -> None:
    proc = _run(tmp_path, 1000, "ulimit -Sn 4096; ")  # the soft limit is raised as far as needed
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Too many open files" not in proc.stdout + proc.stderr
    assert "worker  1000   1000" in proc.stdout  # counts per role, not 1,000 lines
    assert "worker-999" not in proc.stdout
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert len(summary["tasks"]) == 1000 and {t["state"] for t in summary["tasks"]} == {"succeeded"}


def test_a_hard_file_limit_too_low_is_refused_before_anything_starts(tmp_path: Path) -> None:
    proc = _run(tmp_path, 1000, "ulimit -n 4096; ")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "need about" in proc.stderr and "ulimit -n" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_status_of_a_large_job_shows_counts_per_role_unless_all(tmp_path: Path) -> None:
    from tests.conftest import tfdist

    assert _run(tmp_path, 40).returncode == 0
    job_id = json.loads(tfdist("list", "--json").stdout)[0]["id"]
    short = tfdist("status", job_id).stdout
    assert "worker: 40 tasks (40 succeeded)" in short and "worker-39" not in short
    assert "worker-39" in tfdist("status", job_id, "--all").stdout

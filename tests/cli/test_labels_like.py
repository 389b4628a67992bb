"""Labels kept with a job (``--label``, ``labels:``), ``tfdist list --label`` and
``tfdist submit --like JOB``: the real CLI, bad input one line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import tfdist


def _refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    assert proc.stderr.startswith("tfdist: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def _jobs(*flags: str) -> list[dict]:
    proc = tfdist("list", "--json", "--all", *flags, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip().startswith("[") else []


def _wait_ended(job_id: str) -> dict:
    for _ in range(600):
        job = next(j for j in _jobs() if j["id"] == job_id)
        if job["state"] not in ("submitted", "running"):
            return job
        time.sleep(0.1)
    pytest.fail(f"{job_id} did not end")


@pytest.mark.parametrize("flag, needle", [
    ("bad", "'bad' is not KEY=VALUE"),
    ("te am=x", "'te am' is not a Kubernetes label key"),
    ("team=a b", "is not a Kubernetes label value"),
    (f"team={'v' * 64}", "is not a Kubernetes label value"),
    ("-team=x", "is not a Kubernetes label key"),
    ("team=\u00e9", "is not a Kubernetes label value"),
    ("team=x\ny", "is not a Kubernetes label value"),
])
def test_a_bad_label_is_one_line_and_starts_nothing(tmp_path: Path, flag: str, needle: str) -> None:
    for cmd in ("submit", "run"):
        proc = tfdist(cmd, "--runs-dir", str(tmp_path / "runs"), f"--label={flag}", "--workers", "1",
                      "--", "python", "-c", "pass", cwd=tmp_path, timeout=60)
        _refused(proc, "--label", needle)
    _refused(tfdist("list", f"--label={flag}", timeout=60), "--label", needle)
    assert not (tmp_path / "runs").exists()


def test_a_bad_label_in_a_job_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: j\nroles: {worker: 1}\ncommand: [python, -c, pass]\nlabels: {'a b': x}\n")
    _refused(tfdist("run", str(path), cwd=tmp_path, timeout=60), "labels", "'a b' is not a Kubernetes label key")


def test_labels_are_kept_listed_filtered_and_carried_by_like(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    job = tmp_path / "job.yaml"
    job.write_text("name: lab\nroles: {worker: 1}\ncommand: [python, -c, pass]\nlabels: {team: vision}\n")
    ran = tfdist("run", "-q", str(job), "--runs-dir", runs, "--label", "exp=a1", cwd=tmp_path, timeout=120)
    assert ran.returncode == 0, ran.stderr
    other = tfdist("run", "-q", "--runs-dir", runs, "--label", "team=nlp", "--workers", "1", "--",
                   "python", "-c", "pass", cwd=tmp_path, timeout=120)
    assert other.returncode == 0, other.stderr
    (first,) = _jobs("--label", "team=vision")
    assert first["labels"] == {"team": "vision", "exp": "a1"}
    assert _jobs("--label", "team=vision", "--label", "exp=a1") == [first]
    assert _jobs("--label", "Team=vision") == [] and _jobs("--label", "team=Vision") == []
    assert _jobs("--label", "team=visio") == [] and _jobs("--label", "eam=vision") == []
    assert len(_jobs()) == 2
    shown = tfdist("list", "--label", "team=nlp", timeout=60)
    assert "team=nlp" in shown.stdout and first["id"] not in shown.stdout
    status = tfdist("status", first["id"], timeout=60)
    assert "labels: exp=a1 team=vision" in status.stdout, status.stdout
    spec = (Path(first["run_dir"]) / "job.yaml").read_text()
    assert "labels:" in spec and "exp: a1" in spec  # kept in the spec itself: it round-trips

    # --like: the stored spec, the flags and --set on top
    again = tfdist("submit", "--like", first["id"], "--workers", "2", "--label", "exp=a2",
                   "--runs-dir", runs, cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr
    new_id = again.stdout.strip().splitlines()[-1]
    assert new_id != first["id"]
    done = _wait_ended(new_id)
    assert done["state"] == "succeeded" and done["labels"] == {"team": "vision", "exp": "a2"}
    assert done["name"] == "lab"
    assert "worker:\n    replicas: 2\n" in (Path(done["run_dir"]) / "job.yaml").read_text()


def test_like_with_bad_input_is_one_line(tmp_path: Path) -> None:
    ran = tfdist("run", "-q", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--", "python",
                 "-c", "pass", cwd=tmp_path, timeout=120)
    assert ran.returncode == 0, ran.stderr
    (job,) = _jobs()
    (tmp_path / "j.yaml").write_text("name: x\n")
    _refused(tfdist("submit", "--like", job["id"], str(tmp_path / "j.yaml"), timeout=60),
             "--like", "give no job file")
    _refused(tfdist("submit", "--like", job["id"], "--set", "roles.worker.replicas=-1", timeout=60),
             "roles.worker.replicas")
    (Path(job["run_dir"]) / "job.yaml").unlink()
    _refused(tfdist("submit", "--like", job["id"], timeout=60), "--like", "cannot read")
    assert len(_jobs()) == 1

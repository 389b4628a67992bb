"""The quick form's flags given with a job file mean what ``--set`` says; never ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.cli.parser import build_parser
from tfdist.cli.run import load_job
from tfdist.errors import SpecError


def _job(tmp_path: Path, *flags: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "job.yaml"
    path.write_text("name: from-file\nroles: {worker: 2}\ncommand: [python, -c, pass]\nenv: {A: '1'}\n")
    for cmd in ("run", "submit"):
        args = build_parser().parse_args([cmd, str(path), *flags])
        job = load_job(args, [])
    return job


def test_quick_flags_apply_to_a_job_file(tmp_path: Path) -> None:
    job = _job(tmp_path, "--name", "x", "--workers", "5", "--chief", "--env", "B=010", "--env", "C=a: b")
    assert job.name == "x" and job.roles["worker"].replicas == 5 and job.roles["chief"].replicas == 1
    assert job.env == {"A": "1", "B": "010", "C": "a: b"}
    assert _job(tmp_path).name == "from-file"  # no flag: the file as it is
    with_set = _job(tmp_path, "--workers", "5", "--set", "roles.worker.replicas=3")
    assert with_set.roles["worker"].replicas == 3  # --set is the last word


def test_a_bad_quick_flag_with_a_job_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="--env 'B': write NAME=VALUE"):
        _job(tmp_path, "--env", "B")
    with pytest.raises(SpecError, match="--workers -1"):
        _job(tmp_path, "--workers", "-1")

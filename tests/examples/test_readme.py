"""The examples' README says what each example job shows (no TensorFlow needed)."""

from __future__ import annotations

from pathlib import Path

from tfdist import spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_every_example_job_is_valid_and_described():
    readme = (EXAMPLES / "README.md").read_text()
    # run directories (tfdist-runs/, git-ignored) hold copies of jobs that ran from here
    jobs = sorted(p for p in EXAMPLES.rglob("*.yaml") if "tfdist-runs" not in p.parts)
    assert len(jobs) >= 6
    for job in jobs:
        name = job.relative_to(EXAMPLES).as_posix()
        assert name in readme, f"examples/README.md does not describe {name}"
        loaded = spec.load(job)  # a job file that does not validate fails here
        assert Path(loaded.workdir).is_dir()

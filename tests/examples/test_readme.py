"""The examples' README says what each example job shows (no TensorFlow needed)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tfdist.spec import load

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_every_example_job_is_valid_and_described():
    readme = (EXAMPLES / "README.md").read_text()
    # run directories (tfdist-runs/, git-ignored) hold copies of jobs that ran from here
    files = sorted(p for p in EXAMPLES.rglob("*.yaml") if "tfdist-runs" not in p.parts)
    assert len(files) >= 6
    for job in files:
        name = job.relative_to(EXAMPLES).as_posix()
        assert name in readme, f"examples/README.md does not describe {name}"
        kind = (yaml.safe_load(job.read_text()) or {}).get("kind")
        if kind not in (None, "TFJob"):
            continue  # a Kubernetes object for users (the Role tfdist needs), not a job
        loaded = load.from_file(job)  # a job file that does not validate fails here
        assert Path(loaded.workdir).is_dir()

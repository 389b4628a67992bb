"""The README's YARN lines, as written, on the project's own `make yarn-up` cluster (two
NodeManagers, no other application): a container per task (`--backend yarn`), and Spark on
YARN (`--backend spark --spark-master yarn`, whose first run stages Spark's jars). Here,
in the YARN group, because that is when the cluster is up (tests/examples/test_readme.py
runs the README's other lines); nothing of either job is left at the ResourceManager."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends.spark.spark_cluster import missing
from tests.backends.yarn.yarn_cluster import Cluster
from tests.examples.test_readme import backend_of, readme_runs, run_as_written

pytestmark = [pytest.mark.yarn, pytest.mark.integration, pytest.mark.timeout(900)]

LINES = readme_runs("yarn", "spark")
YARN_LINES = [argv for argv in LINES
              if backend_of(argv) == "yarn" or argv[argv.index("--spark-master") + 1:][:1] == ["yarn"]]


def test_the_readme_shows_both_yarn_lines() -> None:
    assert sorted(backend_of(argv) for argv in YARN_LINES) == ["spark", "yarn"], YARN_LINES


@pytest.mark.parametrize("argv", YARN_LINES, ids=" ".join)
def test_the_readme_s_yarn_line_runs_as_written(argv: list[str], yarn_env: Cluster, tmp_path: Path) -> None:
    if backend_of(argv) == "spark" and missing():
        pytest.skip(missing() or "")
    run_as_written(argv, tmp_path, env=yarn_env.env)
    assert not yarn_env.live_apps("tfdist-job-digits-mwms", wait=30)

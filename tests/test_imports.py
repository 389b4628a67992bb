"""`import tfdist` (and the CLI module) never imports TensorFlow, Ray, Kubernetes or pyspark."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("tensorflow", "ray", "kubernetes", "pyspark", "tf_keras", "keras", "matplotlib",
         # the dashboard's web stack and the PostgreSQL driver (optional extras)
         "tfdist.ui", "starlette", "uvicorn", "jinja2", "anyio", "plotly", "psycopg")


@pytest.mark.parametrize("module", ["tfdist", "tfdist.cli", "tfdist.api", "tfdist.runtime", "tfdist.backends.local"])
def test_import_is_light(module: str) -> None:
    code = (
        f"import sys, {module}; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"{module} imported {out.strip()}"


@pytest.mark.parametrize("module", ["tfdist", "tfdist.cli", "tfdist.jobs.store", "tfdist.jobs.manage"])
def test_commands_that_read_the_store_do_not_build_the_spec_models(module: str) -> None:
    """--help, list, status, logs: no spec (building its records costs more CPU than
    everything else these commands do)."""
    code = f"import sys, {module}; print('tfdist.jobspec' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "False", f"{module} imported tfdist.jobspec"


def test_the_run_path_validates_without_pydantic() -> None:
    """Importing pydantic and building models was ~80 ms of a 0.25 s ``tfdist run`` (issue 12);
    the spec is checked by tfdist.jobspec.schema with the standard library."""
    code = ("import sys, tfdist.api, tfdist.jobspec.load; tfdist.jobspec.load.quick(['true'], workers=4); "
            "print(sorted(m for m in ('pydantic', 'pydantic_core') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_what_starts_a_local_task_needs_neither_the_job_store_nor_pyyaml() -> None:
    """``tfdist run`` starts its tasks before it opens the job store or writes job.yaml
    (supervisor.observer.Deferred) and before rich draws anything; importing sqlite3, PyYAML
    and rich first was ~35 ms of every job's start. A quick-form job is built, planned and
    checked here as ``run`` does, with its plain progress lines (output piped)."""
    code = ("import sys, tfdist.cli.main, tfdist.cli.run, tfdist.api, tfdist.backends.local, "
            "tfdist.supervisor.loop, tfdist.jobspec.load; job = tfdist.jobspec.load.quick(['true'], workers=2); "
            "tfdist.backends.create('local', job, tfdist.api.BackendOptions()).check(); "
            "import io, tfdist.cli.live as live; live.observer_for(quiet=False, as_json=False, stream=io.StringIO()); "
            "print(sorted(m for m in ('sqlite3', 'yaml', 'tfdist.jobs.store', 'tfdist.jobs.recorder', "
            "'rich', 'hashlib', 'secrets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_dashboard_and_the_sqlite_store_leave_the_web_stack_and_driver_alone() -> None:
    """``tfdist list`` (the SQLite store) imports no web stack and no psycopg; the dashboard
    imports its web stack but not psycopg unless the store is PostgreSQL."""
    code = ("import sys, tfdist.cli.jobs, tfdist.jobs.store as s, tempfile, os; "
            "s.Store(os.path.join(tempfile.mkdtemp(), 'jobs.db')).jobs(); "
            "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2', 'psycopg', 'tfdist.ui') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = ("import sys, tfdist.ui.app; "
            "print(sorted(m for m in ('starlette', 'jinja2', 'psycopg', 'tensorflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['jinja2', 'starlette']"

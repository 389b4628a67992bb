"""Per-job Python environments without the network: the spec field, the cache key, the
layering file, the one line shown from a failed build, Ray's runtime_env, Kubernetes'
refusal, and bad input through the real CLI (exit 2, one line, nothing in the cache)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist
from tfdist.errors import SpecError
from tfdist.jobspec import load, model
from tfdist.pyenv import plan as plan_mod

JOB = {"name": "p", "command": ["python", "x.py"], "roles": {"worker": 1}}


def job(**python) -> model.JobSpec:
    return load.from_dict({**JOB, "python": python})


def test_set_python_requirements_like_any_field(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: p\ncommand: [python, x.py]\nroles: {worker: 1}\n")
    got = load.from_file(tmp_path / "job.yaml", ["python.requirements=[six==1.16.0, idna]"])
    assert got.python.requirements == ["six==1.16.0", "idna"]
    assert load.from_dict(got.to_dict()) == got  # round-trips
    assert job(requirements="six").python.requirements == ["six"]
    with pytest.raises(SpecError, match="unknown key 'requirement' in python; did you mean 'requirements'"):
        job(requirement=["six"])


def test_key_follows_content_not_order(tmp_path: Path) -> None:
    (tmp_path / "req.txt").write_text("# pinned\nidna==3.6  # for urls\n\n")
    a = plan_mod.plan_for(job(requirements=["six==1.16.0", "idna"]).python, tmp_path)
    b = plan_mod.plan_for(job(requirements=["idna", "six==1.16.0"]).python, tmp_path)
    c = plan_mod.plan_for(job(requirements=["six==1.15.0", "idna"]).python, tmp_path)
    f1 = plan_mod.plan_for(job(requirements_file="req.txt").python, tmp_path)
    (tmp_path / "req.txt").write_text("idna==3.7\n")
    f2 = plan_mod.plan_for(job(requirements_file="req.txt").python, tmp_path)
    assert a.key == b.key and a.key != c.key and f1.key != f2.key
    assert plan_mod.install_args(f2) == ["-r", str(tmp_path / "req.txt")]
    other_base = plan_mod.plan_for(job(requirements=["idna", "six==1.16.0"]).python, tmp_path, bases=["/x"])
    assert other_base.key != a.key  # layered over another tfdist environment: another env


def test_missing_requirements_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"python.requirements_file: cannot read nope.txt .*relative to the workdir"):
        plan_mod.plan_for(job(requirements_file="nope.txt").python, tmp_path)


def test_layer_puts_the_running_tfdist_after_the_jobs_packages() -> None:
    import tfdist

    bases = plan_mod.base_dirs()
    root = str(Path(tfdist.__file__).resolve().parent.parent)
    assert root in bases
    text = plan_mod.layer_pth(bases)
    assert text.splitlines()[0].startswith("import site; site.addsitedir(")
    assert len(text.splitlines()) == len(bases)


@pytest.mark.parametrize(
    "output,line",
    [
        (["Using Python 3.11.7 environment at: e", "error: No solution found when resolving dependencies",
          "  cause: Because there is no version of six==99 and you require six==99, we can conclude that your requirements are unsatisfiable."],
         "No solution found when resolving dependencies: Because there is no version of six==99 and you require six==99, we can conclude that your requirements are unsatisfiable."),
        (["error: Request failed after 3 retries in 8.0s", "  cause: Failed to fetch: http://127.0.0.1:9/simple/idna/",
          "  cause: tcp connect error", "  cause: Connection refused (os error 111)"],
         "Request failed after 3 retries in 8.0s: Connection refused (os error 111)"),
        (["Collecting six==99", "ERROR: Could not find a version that satisfies the requirement six==99 (from versions: 1.0)",
          "ERROR: No matching distribution found for six==99"], "No matching distribution found for six==99"),
        ([], "the build tool failed without a message"),
    ],
)
def test_error_line_is_the_line_that_matters(output: list[str], line: str) -> None:
    assert plan_mod.error_line(output) == line


def test_ray_runtime_env_carries_the_requirements(tmp_path: Path) -> None:
    from tfdist.backends.ray.plan import runtime_env_for

    (tmp_path / "req.txt").write_text("idna==3.6\nsix==1.16.0\n")
    j = load.from_dict({**JOB, "workdir": str(tmp_path), "ray": {"pip": ["six==1.16.0"], "working_dir": False},
                        "python": {"requirements": ["packaging==24.0"], "requirements_file": "req.txt"}})
    assert runtime_env_for(j) == {"pip": ["six==1.16.0", "packaging==24.0", "idna==3.6"]}
    assert runtime_env_for(load.from_dict({**JOB, "ray": {"working_dir": False}})) == {}


def test_kubernetes_refuses_requirements_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "name: p\ncommand: [python, x.py]\nroles: {worker: 1}\nkubernetes: {image: tf:1}\npython: {requirements: [six]}\n"
    )
    for args in (["render", "job.yaml"], ["run", "job.yaml", "--backend", "kubernetes"]):
        proc = tfdist(*args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tfdist: error: python.requirements: "), proc.stderr
        assert "the image must hold the packages" in lines[0], proc.stderr
    assert tfdist("render", "job.yaml", "--set", "python.requirements=[]", cwd=tmp_path).returncode == 0


def test_bad_requirements_file_and_unreachable_index_start_nothing(tmp_path: Path) -> None:
    """No network needed: the index is a closed local port."""
    runs = tmp_path / "runs"
    base = ["run", "--runs-dir", str(runs), "--workers", "1", "--name", "bad"]
    proc = tfdist(*base, "--set", "python.requirements_file=missing.txt", "--", "python", str(BIN / "ok.py"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "python.requirements_file: cannot read missing.txt" in proc.stderr
    env = dict(UV_HTTP_RETRIES="0", PIP_RETRIES="0")
    proc = tfdist(*base, "--set", "python.requirements=[idna==3.6]", "--set", "python.index_url=http://127.0.0.1:9/simple",
                  "--", "python", str(BIN / "ok.py"), cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr  # resolved before building
    last = proc.stderr.strip()
    assert last.startswith("tfdist: error: python.requirements: cannot build the job's environment: "), proc.stderr
    assert "Connection refused" in last or "connect" in last.lower(), last
    assert not runs.exists() or not any(runs.iterdir())  # no run directory, no task
    assert not (Path(os.environ["TFDIST_HOME"]) / "envs").exists()  # nothing cached, not even a lock


def test_env_clean_needs_a_choice() -> None:
    proc = tfdist("env", "clean")
    assert proc.returncode == 2 and "give --unused" in proc.stderr
    proc = tfdist("env", "list")
    assert proc.returncode == 0 and "no cached Python environments" in proc.stdout


def test_cache_knows_who_uses_an_environment(tmp_path: Path) -> None:
    """A use by a live process (this test) keeps an environment; a dead one's does not."""
    import json
    import subprocess
    import sys

    from tfdist.pyenv import build, cache

    root = build.envs_root()
    held, free, unfinished = (root / k for k in ("a" * 16, "b" * 16, "c" * 16))
    for env in (held, free, unfinished):
        (env / "bin").mkdir(parents=True)
        (env / "bin" / "x").write_bytes(b"x" * 1000)
    for env in (held, free):
        (env / build.META).write_text(json.dumps({"requirements": ["six==1.16.0"], "built_at": 1.0}))
    build.record_use(held, "job-a", "job-a-run")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (free / build.USES).write_text(json.dumps({"time": 5.0, "job": "job-b", "run": None,
                                               "pid": int(dead.stdout), "start": 1.0}) + "\n")
    found = {e.key[0]: e for e in cache.cached()}
    assert found["a"].running == 1 and found["a"].jobs == ["job-a-run"] and found["a"].size >= 1000
    assert found["b"].running == 0 and found["b"].jobs == ["job-b"] and found["b"].last_used == 5.0
    assert not found["c"].complete
    assert cache.remove(found["a"]) == "in use by a running job" and held.is_dir()
    assert cache.remove(found["b"]) is None and not free.exists()
    assert cache.remove(found["c"]) is None and not unfinished.exists()
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == [held.name]

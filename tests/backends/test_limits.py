"""``resources.memory`` and ``cpus`` enforced on the local backend with cgroups: a task that
outgrows its memory is killed by the kernel and the root cause says so, a CPU quota throttles
(as the group's own ``cpu.stat`` counts it), no group outlives its job (a clean end, a
SIGKILLed tfdist, a killed owner's leftovers) and what cannot be enforced is refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, TFDIST, still_alive, tfdist
from tfdist.node import cgroups

pytestmark = pytest.mark.integration


def _layout() -> cgroups.Layout | None:
    try:
        return cgroups.detect(["memory", "cpu"])
    except cgroups.CgroupError:
        return None


LAYOUT = _layout()
needs_cgroups = pytest.mark.skipif(
    os.geteuid() != 0 or LAYOUT is None,
    reason="creating cgroups needs root and a memory and cpu controller (cgroup v1 or v2)",
)


def job_dirs(job: str) -> set[str]:
    """The cgroup directories of jobs named ``job`` in this node's hierarchies right now
    (``<owner>-<job name>-<hex>``: other jobs running meanwhile are not counted)."""
    assert LAYOUT is not None
    found = set()
    for root in LAYOUT.hierarchies():
        base = Path(root, cgroups.BASE)
        if base.is_dir():
            found |= {str(p) for p in base.iterdir() if p.is_dir() and f"-{job}-" in p.name}
    return found


def write_job(tmp_path: Path, name: str, command: list[str], resources: str) -> Path:
    job = tmp_path / f"{name}.yaml"
    job.write_text(f"name: {name}\ncommand: {json.dumps(command)}\n"
                   f"roles: {{worker: {{replicas: 1, resources: {resources}}}}}\n")
    return job


@needs_cgroups
def test_a_task_over_its_memory_limit_is_killed_and_the_root_cause_says_memory(tmp_path: Path) -> None:
    job = write_job(tmp_path, "hog", ["python", str(BIN / "hog.py"), "400"], "{memory: 200Mi}")
    proc = tfdist("run", "-q", "--json", "--runs-dir", str(tmp_path / "r"), str(job), timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["tasks"][0]["exit_code"] == -9
    cause = result["root_cause"]
    for part in ("killed for memory", "200 MiB", "parameter servers", "strategy: parameter_server"):
        assert part in cause["description"], cause
        assert part in cause["message"], cause
    assert "allocated 400 MB" not in next((tmp_path / "r").rglob("worker-0.log")).read_text()
    assert not job_dirs("hog")  # its group went with it


@needs_cgroups
def test_the_same_task_under_a_larger_limit_succeeds(tmp_path: Path) -> None:
    job = write_job(tmp_path, "fits", ["python", str(BIN / "hog.py"), "50"], "{memory: 300Mi}")
    proc = tfdist("run", "-q", "--json", "--runs-dir", str(tmp_path / "r"), str(job), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["root_cause"] is None


@needs_cgroups
def test_half_a_cpu_is_throttled_to_half_a_core(tmp_path: Path) -> None:
    """Judged from the kernel's own counters, no clock: the group was throttled, and the CPU
    time its two spinning processes used is about its quota (50 ms) in each period they ran
    in: at least that in every throttled period, at most that (plus a little) in all."""
    job = write_job(tmp_path, "spin", ["python", str(BIN / "spin.py"), "2", "2"], "{cpus: 0.5}")
    proc = tfdist("run", "--runs-dir", str(tmp_path / "r"), str(job), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if '"cpu_seconds"' in ln)
    report = json.loads(line[line.index("{"):])
    stat = report["stat"]
    assert stat, report  # it found its own group's cpu.stat
    assert stat["nr_throttled"] > 0, report
    # a throttled period is one whose 50 ms it used up; no period gives it more than that
    assert stat["nr_throttled"] * 0.05 * 0.9 <= report["cpu_seconds"] <= stat["nr_periods"] * 0.05 * 1.2 + 0.05, report


@needs_cgroups
def test_sigkill_of_tfdist_leaves_no_group(tmp_path: Path) -> None:
    job = write_job(tmp_path, "killed", ["python", str(BIN / "hang.py")], "{memory: 200Mi, cpus: 1}")
    cli = subprocess.Popen([*TFDIST, "run", "--runs-dir", str(tmp_path / "r"), str(job)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert cli.stdout is not None
    pids: list[int] = []
    for line in cli.stdout:
        found = re.search(r"pid (\d+) child (\d+)", line)
        if found:
            pids = [int(found.group(1)), int(found.group(2))]
            break
    assert pids, "the task did not start"
    ours = job_dirs("killed")
    assert ours, "the running task has no group"
    cli.kill()
    cli.wait(timeout=10)
    assert still_alive(pids, 10) == []
    deadline = time.monotonic() + 10  # the guardian removes them once the task is dead
    while job_dirs("killed") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not job_dirs("killed")


@needs_cgroups
def test_a_later_run_removes_what_a_dead_owner_left(tmp_path: Path) -> None:
    """A job directory whose owner (and its guardian) died is removed by the next run that
    has limits."""
    assert LAYOUT is not None
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = [Path(root, cgroups.BASE, f"{dead.pid}.1-left-000000000000", "worker-0.1")
            for root in LAYOUT.hierarchies()]
    for group in left:
        group.mkdir(parents=True)
    job = write_job(tmp_path, "next", ["python", str(BIN / "ok.py")], "{memory: 100Mi}")
    proc = tfdist("run", "--runs-dir", str(tmp_path / "r"), str(job), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not any(g.parent.exists() for g in left)


@needs_cgroups
def test_a_warm_spare_runs_under_its_task_s_limit(tmp_path: Path) -> None:
    """The spare that becomes the restarted task was started in a group of its own with the
    role's limit, like the cold first attempt."""
    from tests.backends.test_warm_spares import TASK, run

    result, seen = run(tmp_path, "--name", "warmlimit", "--set", "roles.worker.resources.memory=2Gi",
                       "--workers", "1", "--",
                       "python", str(TASK))
    assert result["state"] == "succeeded", result["log"]
    spare = int(result["log"].split("SPARE ")[1].split()[0])
    assert seen[1]["pid"] == spare and "no warm spare" not in result["log"]
    assert LAYOUT is not None
    memory = "0::" if LAYOUT.version == 2 else "memory:"
    cold, warm = ([line.split(":", 2)[2] for line in seen[n]["cgroups"] if memory in line][0] for n in (0, 1))
    assert cold.startswith(f"/{cgroups.BASE}/") and warm.startswith(f"/{cgroups.BASE}/") and cold != warm
    assert cold.rsplit("/", 1)[0] == warm.rsplit("/", 1)[0]  # one job directory
    assert seen[0]["memory_limit"] == seen[1]["memory_limit"] == str(2 << 30)  # as each read its own
    assert not job_dirs("warmlimit")


@pytest.mark.parametrize(("value", "words"), [
    ("NaN", "not a memory size"), ("'-1'", "no sign"), ("'0'", "more than 0 bytes"),
    ("99999999Ti", "at most 1Pi"), ("500m", "milli"), ("-1", "valid string"),
])
def test_bad_memory_values_are_refused_with_exit_2(tmp_path: Path, value: str, words: str) -> None:
    job = write_job(tmp_path, "bad", ["python", str(BIN / "ok.py")], f"{{memory: {value}}}")
    proc = tfdist("run", "--runs-dir", str(tmp_path / "r"), str(job), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "roles.worker.resources.memory" in lines[0] and words in lines[0], lines
    assert "ok from" not in proc.stdout and not (tmp_path / "r").exists()


@needs_cgroups
def test_limits_the_kernel_refuses_are_refused_before_anything_starts(tmp_path: Path) -> None:
    """Not root: no group can be made, so the job is refused, exit 2, naming the field; the
    task never runs without its limit."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs util-linux's setpriv to run tfdist as another user")
    shared = Path(tempfile.mkdtemp(prefix="tfdist-limits-"))  # pytest's own is root's alone
    try:
        shared.chmod(0o777)
        job = write_job(shared, "norights", ["sh", "-c", "echo ran"], "{memory: 100Mi}")
        (shared / "home").mkdir(mode=0o777)
        proc = subprocess.run(
            [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", *TFDIST,
             "run", "--runs-dir", str(shared / "r"), str(job)],
            capture_output=True, text=True, timeout=120, cwd=shared,
            env={**os.environ, "TFDIST_HOME": str(shared / "home")},
        )
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tfdist: error: roles.worker.resources.memory: cannot be enforced here"), lines
    assert "ran" not in proc.stdout

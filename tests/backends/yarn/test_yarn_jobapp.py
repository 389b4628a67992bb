"""The job's own application (``tfdist-JOB``, tfdist's process as its unmanaged AM) on the
real cluster of yarn/yarn.sh: listed by the RM under the job's name, queue and tags, with
TensorBoard's URL as its tracking URL while ``--tensorboard`` serves it, finished as the job
ended; and a job application the RM will not take is one warning, not a failed job. (A
good job's application: test_yarn_backend's mwms test; a SIGKILLed tfdist's: its SIGKILL
test.)"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.backends.yarn.yarn_cluster import Cluster
from tests.conftest import TFDIST, tfdist
from tfdist.backends.yarn import jobapp

pytestmark = [pytest.mark.yarn, pytest.mark.integration]


def _placed(runs: Path, proc: subprocess.Popen, timeout: float) -> tuple[Path, dict]:
    """The run directory and its yarn_placement.json, once tfdist has submitted."""
    deadline = time.monotonic() + timeout
    while not (found := list(runs.glob("*/yarn_placement.json"))):
        if proc.poll() is not None:
            pytest.fail(f"tfdist ended (exit {proc.returncode}) before submitting: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"tfdist submitted nothing within {timeout:g}s")
        time.sleep(0.2)
    return found[0].parent, json.loads(found[0].read_text())


def test_the_job_application_tracks_tensorboard_and_fails_with_the_job(yarn_env: Cluster, tmp_path: Path) -> None:
    """``--tensorboard``: once TensorBoard is up, the RM's trackingUrl of the job's application
    is its URL (what tfdist printed); the task then fails (exit 3) and the application ends
    FINISHED/FAILED naming the task, its URL back to the RM's list of the run's applications
    (TensorBoard stops with the job)."""
    flag = tmp_path / "go"
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: yarn-jobapp-tb\nroles: {worker: 1}\nrestart: {policy: never}\n"
        f"command: [python, -c, \"import os, sys, time\\nwhile not os.path.exists('{flag}'): time.sleep(0.2)\\n"
        "sys.exit(3)\"]\nyarn: {queue: tfdist}\n")
    proc = subprocess.Popen([*TFDIST, "run", "--quiet", "--json", "--tensorboard", str(job), "--backend", "yarn",
                             "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_dir, placed = _placed(tmp_path / "runs", proc, 120)
        app_id = placed["job_application"]
        assert app_id, placed
        deadline = time.monotonic() + 180
        url, app = "", {}
        while time.monotonic() < deadline and proc.poll() is None:
            url = jobapp.url_in(run_dir / "tensorboard.url")
            app = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}")["app"]
            if url and app.get("trackingUrl") == url:
                break
            time.sleep(0.5)
        assert url and app.get("trackingUrl") == url, (url, app, proc.poll())
        assert app["state"] == "RUNNING" and app["unmanagedApplication"], app
        flag.touch()
        out, err = proc.communicate(timeout=300)
    finally:
        flag.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads(out)
    assert proc.returncode != 0 and result["state"] == "failed", (result.get("root_cause"), err[-2000:])
    assert f"tfdist: TensorBoard: {url}" in err
    app = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}")["app"]
    assert (app["name"], app["queue"], app["state"], app["finalStatus"]) == \
        ("tfdist-yarn-jobapp-tb", "root.tfdist", "FINISHED", "FAILED"), app
    assert app["diagnostics"] == "tfdist: job yarn-jobapp-tb failed: worker-0: exit code 3", app
    run_tag = next(t for t in app["applicationTags"].split(",") if t.startswith("tfdist-run-"))
    assert app["trackingUrl"] == jobapp.run_listing(yarn_env.url, run_tag)
    role = yarn_env.get(f"/ws/v1/cluster/apps/{placed['applications']['worker']}")["app"]
    assert app["applicationTags"] == role["applicationTags"]
    assert (role["state"], role["finalStatus"]) == ("FINISHED", "SUCCEEDED")  # its agent ended it


def test_a_job_application_the_rm_will_not_register_is_a_warning_and_the_job_runs(
        yarn_env: Cluster, tmp_path: Path) -> None:
    """The AM's address (yarn.resourcemanager.scheduler.address) points nowhere: one warning
    line naming the job's application, the job succeeds, and the application is killed at
    the end instead of being left to the RM's AM expiry."""
    conf = tmp_path / "conf"
    conf.mkdir()
    for f in yarn_env.conf_dir.iterdir():
        if f.is_file():
            (conf / f.name).write_bytes(f.read_bytes())
    site = (conf / "yarn-site.xml").read_text()
    start = site.index("<name>yarn.resourcemanager.scheduler.address</name><value>")
    end = site.index("</value>", start)
    (conf / "yarn-site.xml").write_text(
        site[:start] + "<name>yarn.resourcemanager.scheduler.address</name><value>127.0.0.1:1" + site[end:])
    proc = tfdist("run", "--quiet", "--json", "--backend", "yarn", "--runs-dir", str(tmp_path / "runs"),
                  "--name", "yarn-jobapp-refused", "--workers", "1", "--set", "yarn.queue=tfdist", "--",
                  "python", "-c", "import time; time.sleep(8)", cwd=tmp_path, timeout=300,
                  env={"HADOOP_CONF_DIR": str(conf)})
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["state"] == "succeeded", (result.get("root_cause"), proc.stderr[-2000:])
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("tfdist: warning: ")]
    assert len(warnings) == 1 and "the job's application" in warnings[0] and "goes on" in warnings[0], warnings
    placed = json.loads((Path(result["run_dir"]) / "yarn_placement.json").read_text())
    app = yarn_env.get(f"/ws/v1/cluster/apps/{placed['job_application']}")["app"]
    assert (app["name"], app["state"]) == ("tfdist-yarn-jobapp-refused", "KILLED"), app

"""Real jobs on a real Spark standalone cluster on this machine, through the real CLI.

One cluster (a master and two workers of 2 cores each, started from the pyspark
installation with spark-class) is shared by every test of this module and stopped at the
end. What is left after a job is read from the master's JSON status page (running
applications) and from the process table (task processes and their children).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.backends import warm
from tests.backends.spark.spark_cluster import StandaloneCluster, free, free_port, missing
from tests.conftest import (
    BIN,
    TFDIST,
    alive,
    read_jsonl,
    running_pid,
    start_hang_job,
    still_alive,
    summary,
    tasks,
    tfdist,
)
from tests.examples.test_readme import DOCS, readme_runs, run_as_written

if missing():
    pytest.skip(missing() or "", allow_module_level=True)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

HERE = Path(__file__).resolve().parent
SLEEP_ONCE = HERE.parent / "ray" / "sleep_once.py"


#: The README's Spark master (its `--spark-master spark://127.0.0.1:7077` line runs here as
#: written): the module's cluster listens there when the port is free.
README_MASTER = 7077


@pytest.fixture(scope="module")
def cluster():
    c = StandaloneCluster(workers=2, cores=2, port=README_MASTER if free(README_MASTER) else None).start()
    try:
        yield c
    finally:
        c.stop()


def spark_args(cluster: StandaloneCluster, tmp_path: Path) -> list[str]:
    return ["--backend", "spark", "--spark-master", cluster.master, "--runs-dir", str(tmp_path / "runs"),
            "--set", f"spark.master_ui={cluster.ui}"]


def spark_run(cluster, tmp_path: Path, *args: str, timeout: float = 300):
    return tfdist("run", "--quiet", "--json", *spark_args(cluster, tmp_path), *args, cwd=tmp_path,
                  timeout=timeout)


def placement(result: dict) -> dict[str, dict]:
    return json.loads((Path(result["run_dir"]) / "spark_placement.json").read_text())["tasks"]


def _marked(token_part: str) -> list[int]:
    """Processes whose environment carries a tfdist task token containing ``token_part``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if token_part in proc.environ().get("TFDIST_PROC_TOKEN", ""):
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def test_the_readme_s_spark_standalone_command_runs_as_written(cluster, tmp_path: Path) -> None:
    """The README's `--spark-master spark://127.0.0.1:7077` line, as written, on this cluster
    (tests/examples/test_readme.py runs the others)."""
    (argv,) = [a for a in readme_runs("spark") if a[a.index("--spark-master") + 1].startswith("spark://")]
    if argv[argv.index("--spark-master") + 1] != cluster.master:
        pytest.skip(f"port {README_MASTER} was taken: the module's master is {cluster.master}")
    run_as_written(argv, tmp_path)
    assert cluster.active_apps() == []


def test_the_spark_page_s_local_command_runs_as_written(tmp_path: Path) -> None:
    """docs/spark.md's first line, as written: no master given and no SPARK_MASTER, so the
    job runs on Spark in local mode in tfdist's own driver (local[3] for the example's three
    tasks), and every task trains to the end."""
    (argv,) = [a for a in readme_runs("spark", page=DOCS / "spark.md") if "--spark-master" not in a]

    def check(run_dir: Path) -> None:
        result = json.loads((run_dir / "summary.json").read_text())
        assert result["state"] == "succeeded", result
        assert {t["state"] for t in result["tasks"]} == {"succeeded"}
        assert json.loads((run_dir / "spark_placement.json").read_text())["master"] == "local[3]"
        assert "Epoch 3/3" in (run_dir / "logs" / "worker-1.log").read_text()

    with pytest.MonkeyPatch.context() as patch:  # run_as_written passes this environment on
        patch.delenv("SPARK_MASTER", raising=False)
        run_as_written(argv, tmp_path, check=check)


def test_mwms_and_pss_across_both_workers(cluster, tmp_path: Path) -> None:
    # one core per executor: two tasks then run on two executors, whichever worker registered first
    mwms = spark_run(cluster, tmp_path, "--workers", "2", "--name", "mwms",
                     "--set", 'spark.conf={"spark.executor.cores": "1"}', "--",
                     "python", str(BIN / "train.py"), "--epochs", "1", "--steps", "10")
    result = summary(mwms)
    assert mwms.returncode == 0, (result, mwms.stderr[-2000:])
    assert {t["state"] for t in result["tasks"]} == {"succeeded"}
    assert result["metrics"]["accuracy"] > 0.3  # chance is 0.1
    where = placement(result)
    assert set(where) == {"worker-0", "worker-1"}
    assert len({w["executor"] for w in where.values()}) == 2  # one task on each worker's executor
    for name, w in where.items():
        assert tasks(result)[name]["address"] == f"{w['host']}:{w['port']}"
    assert "done accuracy=" in (Path(result["run_dir"]) / "logs" / "worker-1.log").read_text()

    pss = spark_run(cluster, tmp_path, "--chief", "--workers", "1", "--ps", "1", "--name", "pss",
                    "--strategy", "parameter_server", "--",
                    "python", str(BIN / "train.py"), "--epochs", "1", "--steps", "10")
    result = summary(pss)
    assert pss.returncode == 0, (result, pss.stderr[-2000:])
    t = tasks(result)
    assert t["chief-0"]["state"] == "succeeded"
    assert t["ps-0"]["state"] == "stopped" and t["worker-0"]["state"] == "stopped"  # torn down
    assert len({w["executor"] for w in placement(result).values()}) == 2
    assert cluster.active_apps() == []


@pytest.mark.parametrize("program", ["keras_tutorial", "distributor_example"])
def test_the_peers_examples_leave_together_on_spark(cluster, tmp_path: Path, program: str) -> None:
    """TensorFlow's multi-worker Keras tutorial and spark-tensorflow-distributor's example,
    unchanged (tests/examples/peers), on Spark: the agents start them through
    tfdist.node.leave_program (its text shipped with the stage), so every task leaves with its
    peers and exits by itself, 0 (docs/local.md, "How MultiWorkerMirrored tasks leave";
    measured before it: 9 of 15 Spark runs of the tutorial ended more than 3 s apart, one
    worker SIGKILLed at the drain)."""
    from tests.examples.test_peers import DISTRIBUTOR_JOB, JOB, PEERS, assert_left_together

    job = tmp_path / "tutorial.yaml"
    job.write_text(JOB if program == "keras_tutorial" else DISTRIBUTOR_JOB)
    assert f"{program}.py" in job.read_text()
    done = spark_run(cluster, tmp_path, "--set", 'spark.conf={"spark.executor.cores": "1"}', str(job))
    result = summary(done)
    assert done.returncode == 0, (result, done.stderr[-2000:])
    assert_left_together(result)
    assert str(PEERS) in job.read_text()
    assert cluster.active_apps() == []


SHOW = """
import json, os, sys
keys = ["TF_CONFIG", "TFDIST_TASK", "TF_GRPC_REUSE_PORT", "CUDA_VISIBLE_DEVICES", "EXTRA"]
print("ENV " + json.dumps({**{k: os.environ.get(k) for k in keys}, "cwd": os.getcwd(),
      "files": sorted(os.listdir(".")), "data": open("data.txt").read(), "python": sys.executable}))
"""


def test_workdir_travels_as_an_archive(cluster, tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / ".venv").mkdir(parents=True)
    (proj / ".venv" / "big.bin").write_bytes(b"x" * 1000)  # never shipped
    (proj / "show.py").write_text(SHOW)
    (proj / "data.txt").write_text("shipped")
    job = proj / "job.yaml"
    job.write_text("name: envs\ncommand: [python, show.py]\nenv: {EXTRA: '1'}\nroles: {worker: 2}\n")
    proc = spark_run(cluster, tmp_path, str(job))
    result = summary(proc)
    assert proc.returncode == 0, (result, proc.stderr[-2000:])
    for name in ("worker-0", "worker-1"):
        line = next(ln for ln in (Path(result["run_dir"]) / "logs" / f"{name}.log").read_text().splitlines()
                    if ln.startswith("ENV "))
        env = json.loads(line[4:])
        assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": int(name[-1])}
        assert env["EXTRA"] == "1" and env["TF_GRPC_REUSE_PORT"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
        assert env["data"] == "shipped" and env["cwd"] != str(proj) and env["cwd"].endswith("tfdist-workdir")
        assert ".venv" not in env["files"] and "show.py" in env["files"]
        assert env["python"].startswith(str(Path(sys.executable).parent))


@pytest.mark.parametrize(
    ("shape", "program"),
    [(["--workers", "2"], SLEEP_ONCE),
     (["--chief", "--workers", "2", "--ps", "1", "--strategy", "parameter_server"], HERE / "pss_task.py")],
    ids=["mwms", "pss"],
)
def test_killed_task_is_restarted_by_policy(cluster, tmp_path: Path, shape: list[str], program: Path) -> None:
    """worker-1's process is SIGKILLed (like an OOM kill): MWMS restarts the whole group,
    PSS only worker-1; the barrier stage and its agents live on (the same addresses)."""
    group = "parameter_server" not in shape
    runs = tmp_path / "runs"
    job = subprocess.Popen(
        [*TFDIST, "run", "--quiet", "--json", *spark_args(cluster, tmp_path), *shape,
         "--name", "killme", "--set", "restart.policy=on-failure",
         "--set", "restart.backoff_seconds=0", "--", sys.executable, str(program)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        pid = running_pid(job, runs, "killme", "worker-1", timeout=240)
        os.kill(pid, signal.SIGKILL)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    result = json.loads(out)
    assert job.returncode == 0, (result, err[-2000:])
    assert result["restarts_used"] == 1
    t = tasks(result)
    assert t["worker-1"]["restarts"] == 1
    assert t["worker-0"]["restarts"] == (1 if group else 0)
    if not group:  # PSS: the chief succeeded, nothing else restarted, the rest torn down
        assert t["chief-0"]["state"] == "succeeded" and t["chief-0"]["restarts"] == 0
        assert t["ps-0"]["restarts"] == 0 and t["ps-0"]["state"] == "stopped"
    log = (Path(result["run_dir"]) / "logs" / "worker-1.log").read_text()
    assert "restart 0" in log and "restart 1" in log
    assert not alive(pid)
    assert cluster.active_apps() == []


def test_gang_larger_than_the_cluster_is_refused_at_once(cluster, tmp_path: Path) -> None:
    proc = spark_run(cluster, tmp_path, "--workers", "5", "--", "python", str(BIN / "ok.py"), timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot fit the job" in lines[0], proc.stderr
    assert "5 tasks" in lines[0] and "4 task slot(s) in all (2 alive worker(s)" in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert cluster.active_apps(wait=0) == []


def test_no_master_at_the_address_is_one_clear_line(tmp_path: Path) -> None:
    began = time.monotonic()
    proc = tfdist("run", "--backend", "spark", "--spark-master", f"spark://127.0.0.1:{free_port()}",
                  "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--", "python", str(BIN / "ok.py"),
                  cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Spark master answers there" in lines[0], proc.stderr
    assert time.monotonic() - began < 30
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_interrupted_or_killed_tfdist_leaves_nothing(cluster, tmp_path: Path, how: str) -> None:
    """Ctrl-C: tasks stopped, the stage's agents told to end, the job group cancelled, the
    session stopped. SIGKILL: no chance to clean up; the driver JVM exits with its parent
    (pyspark's gateway watches its stdin), the agents see the channel close and kill their
    tasks, the guardians kill whatever is left of the groups."""
    cli, pids = start_hang_job(spark_args(cluster, tmp_path), tmp_path / "runs", how, tmp_path, 240)
    assert cluster.active_apps(wait=0) == [f"tfdist-{how}"]
    cli.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
    try:
        cli.communicate(timeout=90)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == (130 if how == "ctrl-c" else -signal.SIGKILL)
    assert still_alive(pids, wait=30) == []
    deadline = time.monotonic() + 30  # the driver JVM carries the token too; after a SIGKILL
    while _marked(f"{how}-") and time.monotonic() < deadline:  # it ends on its own (stdin's EOF)
        time.sleep(0.5)
    assert _marked(f"{how}-") == []  # nothing of the job's token: no task process, no escapee
    assert cluster.active_apps(wait=60) == []


def test_sigterm_while_the_driver_jvm_starts_leaves_no_jvm(cluster, tmp_path: Path) -> None:
    """SIGTERM to tfdist as its driver JVM starts (pyspark waits for the gateway's port):
    exit 130 and no JVM left. Before the fix pyspark removed the directory the JVM was to
    write its port into, the JVM's main thread died on that and its other threads kept it
    alive, an orphan for good (the same as on YARN, test_spark_on_yarn)."""
    def jvms() -> list[int]:
        return [p.pid for p in psutil.process_iter(["cmdline"])
                if "java" in (p.info["cmdline"] or [""])[0]
                and any("spark.app.name=tfdist-spark-jvm-start" in a for a in p.info["cmdline"] or [])]

    cli = subprocess.Popen([*TFDIST, "run", "--quiet", *spark_args(cluster, tmp_path), "--name", "spark-jvm-start",
                            "--workers", "1", "--", "python", str(BIN / "hang.py")],
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not jvms() and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cli.poll() is None and jvms(), "the driver JVM never started"
        cli.send_signal(signal.SIGTERM)
        _, err = cli.communicate(timeout=90)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 130, err[-2000:]
    deadline = time.monotonic() + 10
    while jvms() and time.monotonic() < deadline:
        time.sleep(0.5)
    left = jvms()
    for pid in left:  # an orphan must not outlive the test
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"driver JVM(s) left running: {left}"
    assert cluster.active_apps(wait=30) == []


def test_submit_list_and_stop_a_detached_spark_job(cluster, tmp_path: Path) -> None:
    sub = tfdist("submit", *spark_args(cluster, tmp_path), "--workers", "2", "--name", "detached", "--",
                 sys.executable, str(BIN / "hang.py"), cwd=tmp_path, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.split()[-1]
    pids: list[int] = []
    logs = ""
    deadline = time.monotonic() + 240
    while len(pids) < 4 and time.monotonic() < deadline:
        logs = tfdist("logs", job_id, cwd=tmp_path, timeout=30).stdout
        pids = [int(p) for pair in re.findall(r"pid (\d+) child (\d+)", logs) for p in pair]
        time.sleep(0.5)
    assert len(pids) == 4, logs
    listed = json.loads(tfdist("list", "--json", cwd=tmp_path, timeout=30).stdout)
    assert [(j["id"], j["state"], j["backend"]) for j in listed] == [(job_id, "running", "spark")]
    stopped = tfdist("stop", job_id, cwd=tmp_path, timeout=120)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert still_alive(pids, wait=10) == []
    assert cluster.active_apps(wait=60) == []


def test_lost_executor_starts_a_new_stage(cluster, tmp_path: Path) -> None:
    """The executor JVM under worker-1 is SIGKILLed: its agent and task die, Spark fails the
    barrier stage, tfdist starts a new one and the policy restarts the task on a new agent
    (same host and port; the standalone worker starts a replacement executor)."""
    runs = tmp_path / "runs"
    job = subprocess.Popen(
        [*TFDIST, "run", "--quiet", "--json", *spark_args(cluster, tmp_path), "--workers", "2",
         "--name", "lose", "--set", "restart.policy=on-failure", "--set", "restart.backoff_seconds=0",
         "--", sys.executable, str(SLEEP_ONCE)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        where = None
        deadline = time.monotonic() + 240
        while where is None and time.monotonic() < deadline and job.poll() is None:
            for run_dir in runs.glob("lose-*"):
                running = [r for r in read_jsonl(run_dir / "events.jsonl") if r["state"] == "running"]
                if len(running) == 2:
                    where = json.loads((run_dir / "spark_placement.json").read_text())
            time.sleep(0.2)
        assert where, f"the job never ran: {job.poll()}"
        executor, app = where["tasks"]["worker-1"]["executor"], where["application"]
        victims = [p for p in psutil.process_iter(["cmdline"])
                   if "CoarseGrainedExecutorBackend" in (line := " ".join(p.info["cmdline"] or []))
                   and app in line and f"--executor-id {executor} " in line + " "]
        assert len(victims) == 1, victims
        victims[0].kill()
        out, err = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
    result = json.loads(out)
    assert job.returncode == 0, (result, err[-2000:])
    assert tasks(result)["worker-1"]["restarts"] == 1 and tasks(result)["worker-1"]["state"] == "succeeded"
    log = (Path(result["run_dir"]) / "logs" / "worker-1.log").read_text()
    assert "worker-1 lost: its Spark task ended" in log and "runs on a new agent" in log, log
    assert cluster.active_apps() == []



@pytest.mark.timeout(600)
def test_a_killed_task_restarts_in_its_agent_s_warm_spare(cluster, tmp_path: Path) -> None:
    """restart.warm_spares on Spark (tests/backends/warm.py): the agent holds the spare, the
    killed task's restart is the spare, its next spare is made; a SIGKILLed tfdist leaves no
    task, no spare, nothing of the job's token and no application."""
    spares = warm.kill_the_task_then_tfdist(spark_args(cluster, tmp_path), tmp_path / "runs", "warm", tmp_path)
    assert still_alive(spares, wait=30) == []
    deadline = time.monotonic() + 30
    while _marked("warm-") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _marked("warm-") == []
    assert cluster.active_apps(wait=60) == []

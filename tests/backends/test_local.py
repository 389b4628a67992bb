"""Real jobs through the real CLI on this machine: TensorFlow clusters on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import BIN, task_envs, tasks, tfdist

pytestmark = pytest.mark.integration


def run_json(tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 240):
    proc = tfdist("run", "--quiet", "--json", "--runs-dir", str(tmp_path / "runs"), *args,
                  env=env, timeout=timeout)
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON summary (rc={proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return proc, result


def test_console_prefixes_and_summary(tmp_path: Path) -> None:
    proc = tfdist("run", "--runs-dir", str(tmp_path), "--workers", "2", "--", "python", str(BIN / "ok.py"))
    assert proc.returncode == 0, proc.stderr
    assert "[worker-0] ok from worker-0" in proc.stdout.replace("  ", " ")
    assert "[worker-1] ok from worker-1" in proc.stdout.replace("  ", " ")
    assert "succeeded" in proc.stdout and "logs:" in proc.stdout
    quiet = tfdist("run", "-q", "--runs-dir", str(tmp_path), "--workers", "2", "--", "python", str(BIN / "ok.py"))
    assert "ok from" not in quiet.stdout and "succeeded" in quiet.stdout


def test_failing_worker_fails_the_job_with_root_cause(tmp_path: Path) -> None:
    proc, result = run_json(tmp_path, "--chief", "--workers", "2", "--", "python", str(BIN / "fail.py"), "3",
                            "worker-1")
    assert proc.returncode == 1
    cause = result["root_cause"]
    assert cause["task"] == "worker-1"
    assert cause["exit_code"] == 3 and cause["description"] == "exit code 3"
    assert len(cause["tail"]) == 20 and cause["tail"][-1] == "boom: simulated failure"
    t = tasks(result)
    assert t["chief-0"]["state"] == "stopped" and t["worker-0"]["state"] == "stopped"
    text = tfdist("run", "--runs-dir", str(tmp_path), "--workers", "2", "--", "python", str(BIN / "fail.py"),
                  "3", "worker-1")
    # the summary leads with the failed task's own last error line, tfdist's words under it
    assert "root cause: worker-1: boom: simulated failure (exit code 3)\n  worker-1 (attempt 0) exit code 3" \
        in text.stdout, text.stdout


def test_tf_config_and_env_reach_every_task(tmp_path: Path) -> None:
    proc, result = run_json(tmp_path, "--chief", "--workers", "2", "--evaluator", "--env", "EXTRA=1", "--",
                            "python", str(BIN / "print_tf_config.py"))
    assert proc.returncode == 0, result
    envs = task_envs(result["run_dir"])
    assert set(envs) == {"chief-0", "worker-0", "worker-1", "evaluator-0"}
    w1 = json.loads(envs["worker-1"]["TF_CONFIG"])
    assert w1["task"] == {"type": "worker", "index": 1}
    assert w1["cluster"]["worker"][1] == tasks(result)["worker-1"]["address"]
    ev = json.loads(envs["evaluator-0"]["TF_CONFIG"])
    assert ev["task"]["type"] == "evaluator" and "evaluator" not in ev["cluster"]
    assert envs["worker-1"]["TF_USE_LEGACY_KERAS"] == "1"
    assert envs["chief-0"]["TFDIST_RUN_DIR"] == result["run_dir"]


def test_gpus_are_split_between_tasks(tmp_path: Path) -> None:
    job = tmp_path / "gpu.yaml"
    job.write_text(
        "name: gpus\ncommand: [python, " + str(BIN / "print_tf_config.py") + "]\n"
        "roles:\n  chief: {replicas: 1, resources: {gpus: 1}}\n  worker: {replicas: 2, resources: {gpus: 2}}\n"
    )
    proc, result = run_json(tmp_path, str(job), env={"TFDIST_GPUS": "0,1,2,3,4"})
    assert proc.returncode == 0, result
    seen = {name: env["CUDA_VISIBLE_DEVICES"] for name, env in task_envs(result["run_dir"]).items()}
    assert seen == {"chief-0": "0", "worker-0": "1,2", "worker-1": "3,4"}
    refused = tfdist("run", "--runs-dir", str(tmp_path / "r2"), str(job), env={"TFDIST_GPUS": "0,1"})
    assert refused.returncode == 2
    assert "asks for 5 GPUs" in refused.stderr
    assert not (tmp_path / "r2").exists()


def test_restart_on_failure_uses_the_budget(tmp_path: Path) -> None:
    job = tmp_path / "flaky.yaml"
    job.write_text(
        "name: flaky\ncommand: [python, " + str(BIN / "flaky.py") + ", '1', worker-1]\n"
        "roles: {chief: 1, worker: 2}\nrestart: {policy: on-failure, max_restarts: 2, backoff_seconds: 0}\n"
    )
    proc, result = run_json(tmp_path, str(job))
    assert proc.returncode == 0, result
    assert result["restarts_used"] == 1
    t = tasks(result)
    # all-reduce: the whole group restarted, each with TFDIST_RESTART_COUNT=1
    assert all(t[n]["restarts"] == 1 for n in ("chief-0", "worker-0", "worker-1"))
    log = (Path(result["run_dir"]) / "logs" / "worker-1.log").read_text()
    assert "restart_count=0" in log and "restart_count=1" in log
    # exit-code policy: 1 is permanent
    proc, result = run_json(tmp_path, str(job), "--set", "restart.policy=exit-code")
    assert proc.returncode == 1 and result["restarts_used"] == 0
    assert "does not retry" in result["root_cause"]["message"]


def test_twenty_jobs_back_to_back_never_hit_address_in_use(tmp_path: Path) -> None:
    """Two streams of ten jobs, each job right after the last one of its stream ended (the
    ports it just released are the likeliest to be handed out again), the two streams at
    once (so reservations also race each other). Each task binds and listens on its port
    as TensorFlow's gRPC server does (tests/bin/bind_like_tf.py: the wildcard address,
    ``SO_REUSEPORT`` only under ``TF_GRPC_REUSE_PORT=1``); the property is the port tfdist
    hands out, so no task imports TensorFlow (every local TensorFlow job binds its real
    server the same way: tests/examples)."""
    from concurrent.futures import ThreadPoolExecutor

    def stream(first: int) -> list[str]:
        problems = []
        for i in range(first, first + 10):
            proc, result = run_json(tmp_path, "--chief", "--workers", "1", "--name", f"ports-{i}", "--",
                                    "python", str(BIN / "bind_like_tf.py"))
            text = "".join(p.read_text() for p in (Path(result["run_dir"]) / "logs").glob("*.log"))
            if proc.returncode != 0 or "address already in use" in text.lower() or text.count("serving") != 2:
                problems.append(f"job {i}: rc={proc.returncode}\n{text[-2000:]}")
        return problems

    with ThreadPoolExecutor(2) as pool:
        problems = [p for found in pool.map(stream, (0, 10)) for p in found]
    assert problems == []
    assert len(list((tmp_path / "runs").glob("ports-*"))) == 20

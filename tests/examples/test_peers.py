"""Code nobody here wrote, run unchanged, ends with every task leaving by itself.

tfdist runs such MultiWorkerMirrored scripts through tfdist.node.leave_program, which holds
each task's exit until every peer's script has returned (docs/local.md, "How
MultiWorkerMirrored tasks leave"); the late-peer test shows the leader waiting.

``peers/keras_tutorial.py`` is TensorFlow's multi-worker Keras tutorial in its own shape, and
``peers/distributor_example.py`` spark-tensorflow-distributor's README example (each knows
only TF_CONFIG, never imports tfdist). Under MultiWorkerMirroredStrategy, worker-0 hosts
the coordination service and can finish its last step, return from ``fit`` and exit while a
peer is still inside that step (docs/local.md, "Success and teardown"): the peer is then
left without the service. A successful job must still end with every task exiting by
itself: none stopped at the drain, and none ending more than the job's drain after the
first (the bound the supervisor applies, read back from the run's own job file). A task
that never left would hold the job until the drain stops it (state "stopped") or, when it
is worker-0, until the subprocess timeout: both fail here.

The jobs are run several times in one test because the exit order is a race: the first
training task to end and how far apart the others end change from run to run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.jobspec import load

pytestmark = pytest.mark.integration

PEERS = Path(__file__).resolve().parent / "peers"
TFDIST = Path(sys.executable).parent / "tfdist"
RUNS = 3  # each ~15-25 s on 2 cores: two TensorFlow processes, 2 epochs of 5 steps

JOB = f"""\
name: keras-tutorial
strategy: multi_worker_mirrored
command: [python, keras_tutorial.py, "2", "5"]
workdir: {PEERS}
env: {{TF_CPP_MIN_LOG_LEVEL: "2"}}
roles:
  worker: 2
"""
DISTRIBUTOR_JOB = JOB.replace("name: keras-tutorial", "name: distributor-example").replace(
    "keras_tutorial.py", "distributor_example.py")


def run_tutorial(tmp_path: Path, attempt: int, job_text: str = JOB) -> tuple[dict, Path]:
    """One ``tfdist run --json`` of the tutorial (or of ``job_text``): (summary, run directory)."""
    job = tmp_path / "tutorial.yaml"
    job.write_text(job_text)
    cmd = [str(TFDIST), "run", "--quiet", "--json", "--runs-dir", str(tmp_path / f"runs-{attempt}"), str(job)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    return summary, Path(summary["run_dir"])


def task_ends(run_dir: Path) -> dict[str, tuple[float, str]]:
    """Each task's last end as the supervisor recorded it: (time, state)."""
    ends: dict[str, tuple[float, str]] = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["state"] in ("succeeded", "failed", "stopped"):
            ends[event["task"]] = (event["time"], event["state"])
    return ends


def assert_left_together(result: dict, workers: tuple[str, ...] = ("worker-0", "worker-1")) -> None:
    """A run of the tutorial (its ``--json`` summary) on any backend: every worker exited 0 by
    itself (none stopped at the drain), none ended more than the job's drain after the first,
    and each logged that it left with its peers (tfdist.node.leave_program)."""
    assert {t["name"]: (t["state"], t["exit_code"]) for t in result["tasks"]} == dict.fromkeys(
        workers, ("succeeded", 0)), result
    run_dir = Path(result["run_dir"])
    ends = [at for at, _ in task_ends(run_dir).values()]
    assert max(ends) - min(ends) <= load.from_file(run_dir / "job.yaml").drain_seconds, ends
    for name in workers:
        log = (run_dir / "logs" / f"{name}.log").read_text()
        assert f"tfdist: {name} left with its peers" in log, log[-2000:]


def test_the_peers_examples_end_with_every_task_leaving_by_itself(tmp_path):
    """The tutorial, the distributor's example, the tutorial again."""
    for attempt in range(RUNS):
        summary, run_dir = run_tutorial(tmp_path, attempt, DISTRIBUTOR_JOB if attempt % 2 else JOB)
        drain = load.from_file(run_dir / "job.yaml").drain_seconds
        states = {t["name"]: (t["state"], t["exit_code"]) for t in summary["tasks"]}
        assert summary["state"] == "succeeded", (attempt, summary["root_cause"])
        # a task stopped at the drain is "stopped" (exit code -15 or -9), not "succeeded"
        assert states == {"worker-0": ("succeeded", 0), "worker-1": ("succeeded", 0)}, (attempt, states)
        ends = task_ends(run_dir)
        assert sorted(ends) == ["worker-0", "worker-1"]
        assert {state for _, state in ends.values()} == {"succeeded"}
        first, last = min(t for t, _ in ends.values()), max(t for t, _ in ends.values())
        assert last - first <= drain, (attempt, f"a task ended {last - first:.1f}s after the first (drain {drain:g}s)")


LATE = 6.0
LATE_JOB = JOB.replace("name: keras-tutorial", "name: late-peer").replace(
    'command: [python, keras_tutorial.py, "2", "5"]', f'command: [python, late_peer.py, "{LATE:g}"]')


def returned_at(log: Path) -> float:
    """When the script of a task returned, as ``peers/late_peer.py`` prints it."""
    for line in log.read_text().splitlines():
        if line.startswith("script returns at "):
            return float(line.split()[-1])
    raise AssertionError(f"{log.name} never printed when its script returned")


def test_the_leader_waits_for_a_late_peer_before_it_leaves(tmp_path):
    """Worker-1 sleeps 6 s after ``fit``: worker-0, whose process hosts the coordination
    service, must not leave before worker-1's script has returned (tfdist holds it:
    node/leave_program.py), and both still exit by themselves, 0."""
    summary, run_dir = run_tutorial(tmp_path, 0, LATE_JOB)
    states = {t["name"]: (t["state"], t["exit_code"]) for t in summary["tasks"]}
    assert states == {"worker-0": ("succeeded", 0), "worker-1": ("succeeded", 0)}, summary["root_cause"]
    ends = task_ends(run_dir)
    late_returned = returned_at(run_dir / "logs" / "worker-1.log")
    assert ends["worker-0"][0] >= late_returned, (
        f"worker-0 ended {late_returned - ends['worker-0'][0]:.1f}s before worker-1's script returned")
    leader_log = (run_dir / "logs" / "worker-0.log").read_text()
    waited = [line for line in leader_log.splitlines() if line.startswith("tfdist: worker-0 left with its peers")]
    assert waited, leader_log[-2000:]
    seconds = float(waited[0].split("waited ")[1].split("s")[0])
    assert seconds >= LATE / 2, waited  # it waited for worker-1's sleep (fit ends ~together)

"""Real loopback clusters (chief + 2 workers + 1 or 2 ps) driving tfdist.runtime.sync.

One chief process per cluster runs several scenarios (programs.py here) and prints
their results as JSON; each test checks one of them. ~2 minutes on 2 cores.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.runtime.sync.cluster import LocalCluster, last_json

# One chief runs many scenarios in the first test that uses a fixture: ~1 min here, given
# room for a machine several times slower.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PROGRAM = str(Path(__file__).with_name("programs.py"))
SRC = str(Path(__file__).resolve().parents[3] / "src")


def _run(workers: int, ps: int, scenarios: list[str]) -> tuple[dict, LocalCluster]:
    cluster = LocalCluster(workers, ps).start()
    try:
        victim = str(cluster.procs["worker-1"].pid)
        proc = cluster.run_chief(
            [sys.executable, PROGRAM, *scenarios],
            timeout=420,
            extra_env={"PYTHONPATH": SRC, "VICTIM_PGID": victim, "TFDIST_TEST_DUMP_AFTER": "400"},
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        result = last_json(proc.stdout)
        result["victim_returncode"] = cluster.procs["worker-1"].poll()  # before stop()
        return result, cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def suite() -> dict:
    scenarios = ["equality", "backup_replay", "keras", "bounded:1", "bounded:1000", "timeout", "k_gt_n"]
    # the failed loop on this one-ps cluster too (rather than a cluster of its own), then the kill last
    result, _ = _run(2, 1, [*scenarios, "worker_error", "kill"])
    return result


@pytest.fixture(scope="module")
def partitioned() -> dict:
    result, _ = _run(2, 2, ["partitioned", "worker_error"])
    return result


def _conserved(stats: dict) -> None:
    """Every gradient the workers counted sending was applied or dropped (the aggregator's
    counts and the drain after the loops ended): two independent counters agree."""
    assert stats["attempts"] == stats["taken"] + stats["dropped"]


def test_sync_step_equals_single_process_average(suite):
    r = suite["equality"]
    assert r["moved"] > 1e-2  # the weights did change
    assert r["max_err"] < 1e-5  # each step: the average of exactly the gradients it names
    # K = N = 2: every step averaged exactly two gradients, one from each worker
    assert r["counts"] == [2] * 6
    assert all(sorted(w) == [0, 1] for w in r["workers"])
    assert r["stats"]["dropped"] == 0
    assert r["sparse"] == [0]  # the embedding's gradient was IndexedSlices
    _conserved(r["stats"])


def test_backup_applies_exactly_k_fresh_gradients(suite):
    """K = 1 of 2 with worker 1 eight times slower: every step applied exactly one gradient,
    computed on that step's parameters (the replay would differ if a late one of worker
    1's, computed on older parameters, had been applied); the late ones were dropped."""
    r = suite["backup_replay"]
    assert r["stats"]["steps"] == 30
    assert r["counts"] == [1] * 30
    assert r["moved"] > 1e-2
    assert r["max_err"] < 1e-5
    slow_sent = r["stats"]["attempts"] - sum(w.count(0) for w in r["workers"])
    assert r["stats"]["dropped"] >= 1
    assert slow_sent >= r["stats"]["dropped"]  # worker 0 never computed a gradient in vain
    _conserved(r["stats"])


def test_partitioned_across_two_ps(partitioned):
    r = partitioned["partitioned"]
    assert r["devices"] == [
        "/job:ps/replica:0/task:0/device:CPU:0",
        "/job:ps/replica:0/task:1/device:CPU:0",
    ]
    assert r["n_vars"] == 10  # 5 variables, 2 shards each
    assert r["moved"] > 1e-2
    assert r["max_err"] < 1e-5
    assert r["counts"] == [2] * 3
    assert r["sparse"] == [0, 1]  # both embedding shards
    _conserved(r["stats"])


def test_bounded_staleness_threshold(suite):
    tight, loose = suite["bounded:1"], suite["bounded:1000"]
    # the same slow worker (its gradients are several steps old): dropped with s = 1,
    # accepted with s = 1000
    assert tight["stats"]["dropped"] >= 1
    assert loose["stats"]["dropped"] <= 2  # at most one in flight per worker when the run ended
    assert loose["per_worker"]["1"] >= 2
    _conserved(tight["stats"])
    _conserved(loose["stats"])


def test_killed_worker_does_not_stall_backup(suite):
    r = suite["kill"]
    assert suite["victim_returncode"] == -9  # worker-1 really died (SIGKILL)
    assert r["k"] == 1
    assert r["steps"] == 40
    assert r["max_gap_after_kill"] < 10.0


def test_keras_thin_loop_trains(suite):
    r = suite["keras"]
    assert r["steps"] == 30
    assert len(r["loss"]) >= 3
    assert r["loss"][-1] < r["loss"][0] * 0.9
    _conserved(r)


def test_timeout_applies_what_arrived(suite):
    r = suite["timeout"]
    assert r["stats"]["steps"] == 20
    # K = N = 2, T = 0.2 s; worker 0 needs 0.15 s a batch, worker 1 2 s: a step takes
    # worker 0's one gradient after the timeout instead of waiting for a second (counted,
    # not timed: a step's seconds follow the machine's load; one CI run saw a 2 s median)
    assert sum(1 for c in r["counts"] if c == 1) >= 15
    assert r["stats"]["dropped"] >= 3  # gradients that came after their step was taken
    _conserved(r["stats"])


def test_more_replicas_than_workers(suite):
    r = suite["k_gt_n"]
    assert r["tokens"] == 4  # 4 permits per step on 2 workers
    assert r["stats"]["steps"] == 20
    assert r["counts"] == [4] * 20  # exactly 4 gradients per step
    _conserved(r["stats"])


def _assert_loop_error_raised(r: dict) -> None:
    """The worker_error scenario's record: the run re-raised the loop's error without
    hanging, the coordinator went idle, finish() ended (it hung, or failed on the closed
    queues, untested before), and the trainer refuses another run, saying to build a new one."""
    assert not r["hung"]
    assert r["raised"].startswith("InvalidArgumentError")
    assert "tfdist-test-worker-error" in r["raised"]
    assert r["idle"] is True
    assert r["finish_hung"] is False and r["finish_dropped"] is not None
    assert r["rerun"] is not None and "build a new trainer" in r["rerun"]


def test_failed_worker_loop_raises_in_chief(partitioned):
    """A worker loop that dies of a non-retryable error (its loss raises at its first step)
    makes ``run`` re-raise that error, with 2 ps, instead of the chief waiting for the
    gradients it will never send; the aggregator and the other loop were stopped."""
    _assert_loop_error_raised(partitioned["worker_error"])


def test_failed_worker_loop_raises_in_chief_with_one_ps(suite):
    """The same with one ps, where the coordinator calls the aggregator through one
    ``RemoteCall`` run on the ps (``ps.RunOnPs``): closing the queues still ends that call,
    and the error is re-raised, not waited on."""
    _assert_loop_error_raised(suite["worker_error"])

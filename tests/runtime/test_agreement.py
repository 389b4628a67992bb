"""The preemption agreement's protocol, with a fake key-value store and one thread per
simulated worker: workers that run their steps in lockstep (a barrier per step stands
for the all-reduce every step does) must all see the same save step, whoever is
preempted and whenever."""

from __future__ import annotations

import threading

import pytest

from tfdist.runtime import progress
from tfdist.runtime.agreement import ENDED, Agreement, due, propose_step, training_tasks


class FakeStore:
    """The coordination service's key-value store: atomic insert, blocking get."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.cond = threading.Condition()

    def insert(self, key: str, value: str) -> bool:
        with self.cond:
            if key in self.values:
                return False
            self.values[key] = value
            self.cond.notify_all()
            return True

    def get(self, key: str, timeout: float | None = None) -> str | None:
        with self.cond:
            if not self.cond.wait_for(lambda: key in self.values, timeout):
                return None
            return self.values[key]


def run_group(workers: int, steps: int, sigterm: dict[int, int], timeout: float = 5.0
              ) -> tuple[dict[int, int | None], dict[int, bool], FakeStore]:
    """Simulate ``workers`` workers training ``steps`` steps; ``sigterm`` maps a worker to
    the step after which it gets SIGTERM. Returns each worker's save step (None: none),
    what :meth:`Agreement.pending` said at the end for those that finished, and the store."""
    store = FakeStore()
    tasks = [f"worker-{i}" for i in range(workers)]
    barrier = threading.Barrier(workers, timeout=timeout)  # the step's all-reduce
    end_flags: list[bool] = []
    end_barrier = threading.Barrier(workers, timeout=timeout)
    saved: dict[int, int | None] = {}
    pending: dict[int, bool] = {}

    def any_worker(flag: bool) -> bool:  # the one all-reduce at the end
        end_flags.append(flag)
        end_barrier.wait()
        result = any(end_flags)
        end_barrier.wait()
        return result

    def worker(i: int) -> None:
        requested = threading.Event()
        agreement = Agreement(store, tasks[i], tasks, requested, scope="run", window=timeout, log=lambda _: None)
        saved[i] = None
        for _ in range(steps):
            barrier.wait()  # the step
            if sigterm.get(i) == agreement.count:
                requested.set()  # what tfdist's signal thread does
            if agreement.tick():
                saved[i] = agreement.count  # and leaves: a peer that did not stops at the barrier
                return
        pending[i] = agreement.pending(any_worker)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 2)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    return saved, pending, store


def test_one_worker_preempted_mid_run_all_save_the_same_step():
    saved, pending, _ = run_group(3, 50, {1: 10})
    assert saved == {0: 13, 1: 13, 2: 13}, saved  # proposed at its next step (11) + LEAD
    assert pending == {}


def test_two_workers_preempted_at_once_agree_on_one_step():
    for lag in (0, 1):
        saved, _, store = run_group(3, 50, {0: 20, 2: 20 + lag})
        assert len(set(saved.values())) == 1 and None not in saved.values(), saved
        assert store.values["run/step"] == str(next(iter(saved.values())))


def test_every_worker_preempted_at_once():
    saved, _, _ = run_group(4, 30, {0: 5, 1: 5, 2: 5, 3: 5})
    assert set(saved.values()) == {8}


@pytest.mark.parametrize("at", [48, 49])
def test_preemption_during_the_last_steps_is_found_at_the_end_by_everyone(at):
    """The agreed step lies beyond the last step: nobody saves in the loop, every worker's
    end-of-run check says so, and nothing hangs."""
    saved, pending, _ = run_group(3, 50, {1: at})
    assert saved == {0: None, 1: None, 2: None}
    assert pending == {0: True, 1: True, 2: True}


def test_a_run_without_preemption_ends_and_releases_the_watchers():
    saved, pending, store = run_group(2, 20, {})
    assert set(saved.values()) == {None} and pending == {0: False, 1: False}
    assert store.values["run/step"] == ENDED


def test_a_peer_that_never_acknowledges_does_not_block_the_proposer_past_its_window():
    store = FakeStore()
    requested = threading.Event()
    logs: list[str] = []
    agreement = Agreement(store, "worker-0", ["worker-0", "worker-1"], requested, scope="s", window=0.2,
                          log=logs.append)
    requested.set()
    assert agreement.tick() is False  # proposes, waits at most the window for worker-1
    assert agreement.step == 1 + 2 and any("worker-1 did not acknowledge" in line for line in logs)
    assert [agreement.tick(), agreement.tick()] == [False, True]


def test_pure_rules():
    assert propose_step(10) == 12
    assert not due(11, None) and not due(11, 12) and due(12, 12)
    assert training_tasks({"chief": ["a"], "worker": ["b", "c"], "ps": ["d"]}) == ["chief-0", "worker-0", "worker-1"]


def test_throttle_reports_by_time_or_by_steps():
    now = [0.0]
    by_time = progress.Throttle(every_seconds=1.0, clock=lambda: now[0])
    now[0] = 0.5
    assert by_time.due(40) is None
    now[0] = 1.0
    assert by_time.due(80) == {"steps_per_sec": 80.0}
    assert by_time.due(81) is None  # counts from the last report
    by_steps = progress.Throttle(every_seconds=None, every_steps=10, clock=lambda: now[0])
    assert by_steps.due(9) is None
    now[0] = 3.0
    assert by_steps.due(10) == {"steps_per_sec": 5.0}
    off = progress.Throttle(every_seconds=None, every_steps=None)
    assert not off.enabled and off.due(10**6) is None

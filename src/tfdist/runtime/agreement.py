"""One step every MultiWorkerMirrored worker saves at, agreed without a per-step collective.

A blocking all-reduce after every batch cost 22 % of ``fit`` throughput (issue 13), so the
agreement goes through the coordination service's key-value store instead, as TensorFlow's
PreemptionCheckpointHandler does; the per-step check only reads an attribute.

Protocol, for one training run (a ``fit`` call or a preemption guard; ``scope`` keeps runs
apart, and every worker creates them in the same order):

- Every worker counts its steps (batch-end hooks, or ``requested()`` calls): the counts
  agree, since every worker runs the same steps. A background thread on every worker
  blocks on the key ``<scope>/step``.
- A worker that got SIGTERM and finds no step agreed yet proposes ``count + LEAD`` by
  inserting that key. The insert is atomic and refuses an existing key, so when several
  workers are preempted at once the first insert wins and the others adopt its step.
- Every watcher that sees the key records the step (the local flag) and acknowledges under
  ``<scope>/ack/<task>``; the proposer waits for every acknowledgement before its next
  step. A peer cannot finish a step without the proposer (each step all-reduces), and
  workers are at most one step apart (TensorFlow's handler relies on the same), so every
  worker knows the step before it reaches it: all save the same step.
- If training ends before the agreed step, :meth:`Agreement.pending` (a one-number
  all-reduce, once per run) tells every worker alike, so they save the end and exit too.

Pure decisions (:func:`propose_step`, :func:`due`) are separate from the key-value I/O
(:class:`KeyValue`) so the protocol is tested with a fake store and threads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

#: Steps between the proposal and the save: the proposer's next step is the earliest a
#: peer that is one step ahead could still check, so two leaves a step to spare.
LEAD = 2
#: Written to a run's step key when it ends without a preemption: wakes the watchers.
ENDED = "ended"
_RUNS = iter(range(1 << 30))


class Store(Protocol):
    """The coordination service's key-value store (or a fake)."""

    def insert(self, key: str, value: str) -> bool:
        """Set ``key``; False if it already had a value (which is kept)."""

    def get(self, key: str, timeout: float | None = None) -> str | None:
        """The value of ``key``, waiting for it; None after ``timeout`` seconds."""


class KeyValue:
    """:class:`Store` over ``tensorflow.python.eager.context``: the cluster's coordination
    service (measured: a value set on one worker reaches a peer's blocked ``get`` at once;
    the blocked call releases the GIL; an insert of an existing key fails)."""

    def __init__(self) -> None:
        import tensorflow as tf
        from tensorflow.python.eager import context

        self._context = context.context()
        self._errors = tf.errors

    def insert(self, key: str, value: str) -> bool:
        try:
            self._context.set_config_key_value(key, value)
        except self._errors.AlreadyExistsError:
            return False
        return True

    def get(self, key: str, timeout: float | None = None) -> str | None:
        millis = 0 if timeout is None else max(1, int(timeout * 1000))
        try:
            return str(self._context.get_config_key_value(key, millis))
        except self._errors.DeadlineExceededError:
            return None


def propose_step(count: int, lead: int = LEAD) -> int:
    """The step a worker that got SIGTERM after ``count`` steps proposes to save at."""
    return count + lead


def due(count: int, step: int | None) -> bool:
    """True when a worker that has done ``count`` steps must save (``step`` agreed)."""
    return step is not None and count >= step


class Agreement:
    """The agreed save step of one training run on this worker (see the module's notes).

    ``requested`` is the local SIGTERM flag (set by tfdist's signal thread, never by a
    signal handler); ``tasks`` names every worker, ``task`` this one. ``window`` bounds the
    proposer's wait for acknowledgements (a peer that never answers is gone: the save
    window's timer ends this task anyway).
    """

    def __init__(
        self,
        store: Store,
        task: str,
        tasks: Iterable[str],
        requested: threading.Event,
        *,
        scope: str | None = None,
        window: float = 8.0,
        log: Callable[[str], None] = print,
    ) -> None:
        self.store = store
        self.task = task
        self.tasks = list(tasks)
        self.requested = requested
        self.scope = scope or f"tfdist/preempt/{next(_RUNS)}"
        self.window = window
        self.log = log
        self.count = 0
        #: The agreed step, once known: written by the watcher thread or the proposer.
        self.step: int | None = None
        self._ended = False
        self._watcher = threading.Thread(target=self._watch, name="tfdist-agreement", daemon=True)
        self._watcher.start()

    @property
    def step_key(self) -> str:
        return f"{self.scope}/step"

    def ack_key(self, task: str) -> str:
        return f"{self.scope}/ack/{task}"

    def _watch(self) -> None:
        try:
            value = self.store.get(self.step_key)
        except Exception:  # the service is gone (a peer's process ended): nothing to agree
            return
        if value is None or value == ENDED:
            return
        self.step = int(value)
        self.store.insert(self.ack_key(self.task), "1")

    def tick(self) -> bool:
        """Count one step; True when this step is the agreed one (save now, then exit).

        Cheap unless a preemption is under way: two attribute reads and an addition.
        """
        self.count += 1
        if self.step is not None:
            return due(self.count, self.step)
        if self.requested.is_set():
            self._propose()
        return False

    def _propose(self) -> None:
        proposal = propose_step(self.count)
        mine = self.store.insert(self.step_key, str(proposal))
        value = self.store.get(self.step_key, self.window)  # ours, or the first proposal
        if value is None or value == ENDED:
            return
        self.step = int(value)
        if not mine:
            return  # the first proposer waits for the acknowledgements
        self.log(f"tfdist: {self.task} asks every worker to save at step {self.step} (now {self.count})")
        deadline = time.monotonic() + self.window
        for task in self.tasks:
            left = deadline - time.monotonic()
            if left <= 0 or self.store.get(self.ack_key(task), left) is None:
                self.log(f"tfdist: {task} did not acknowledge the save step within {self.window:g}s")
                return

    def pending(self, any_worker: Callable[[bool], bool]) -> bool:
        """At the end of the run: True on every worker if a preemption came too late for
        :meth:`tick` (the agreed step lies beyond the end, or SIGTERM came after the last
        step). ``any_worker`` is a one-flag all-reduce: the one collective of the run.
        When it is False the run ends and the watchers are released."""
        flag = self.requested.is_set() or self.step is not None
        if any_worker(flag):
            return True
        self.end()
        return False

    def end(self) -> None:
        """Release the watchers (every worker may call it; the first insert wins)."""
        if not self._ended:
            self._ended = True
            with contextlib.suppress(Exception):  # the service is gone: so are the watchers
                self.store.insert(self.step_key, ENDED)


def training_tasks(cluster: dict[str, list[str]]) -> list[str]:
    """Names of the tasks that train together under MultiWorkerMirrored: chief, workers."""
    return [f"{role}-{i}" for role in ("chief", "worker") for i in range(len(cluster.get(role, [])))]


_ANY_WORKER: dict[int, Callable[[bool], bool]] = {}


def any_worker_fn(strategy: Any) -> Callable[[bool], bool]:
    """A one-flag all-reduce over every replica: True on every worker if any passed True
    (one per strategy: a script that calls ``fit`` many times traces it once)."""
    if id(strategy) not in _ANY_WORKER:
        _ANY_WORKER[id(strategy)] = _any_worker(strategy)
    return _ANY_WORKER[id(strategy)]


def _any_worker(strategy: Any) -> Callable[[bool], bool]:
    import tensorflow as tf

    @tf.function
    def agree(flag: Any) -> Any:
        per_replica = strategy.run(lambda x: tf.cast(x, tf.float32), args=(flag,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return lambda flag: float(agree(tf.constant(1 if flag else 0))) > 0

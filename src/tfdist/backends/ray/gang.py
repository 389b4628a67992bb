"""The life of a Ray job's actors: placed together, made, replaced when they die, ended.

One actor (:class:`tfdist.backends.ray.actor.TaskRunner`) per task, each in its own bundle of
one placement group, so the job gets all its places at once or none. :class:`ActorGang`
holds that group and every task's current actor (:class:`Runner`), and knows how an actor
comes and goes: made in its bundle with a mark of its own, replaced in the same bundle when
it died (wherever Ray now places that bundle: the task's address may change, and with it
the job's cluster map, :class:`tfdist.backends.agent.placement.Placement`), and at the end
told to shut down, killed, and its group removed. What the actors *run* (attempts, their
output and exits, stops) is the driver's (:mod:`tfdist.backends.ray.driver`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tfdist.backends.agent.placement import Placement
from tfdist.backends.ray import actor as ray_actor
from tfdist.cluster import Task
from tfdist.jobspec.model import JobSpec

#: Seconds an actor may stay unreachable before it counts as dead.
UNAVAILABLE_LIMIT = 120.0


class Runner:
    """The driver's side of one task: its actor, its attempt, its pump thread."""

    def __init__(self, name: str, actor: Any, info: dict[str, Any]) -> None:
        self.name = name
        self.actor = actor
        self.info = info
        self.attempt = -1
        self.done = threading.Event()
        self.done.set()
        #: Its actor died (with its node, perhaps): the next start makes a new one first.
        self.dead = False
        #: The thread that follows the running attempt (see RayBackend._pump).
        self.pump: threading.Thread | None = None
        #: The pump of an attempt whose stop got no answer from its actor (its host cut
        #: off?): until it ends, Ray has not said whether the actor is dead, nor where its
        #: bundle goes.
        self.unanswered: threading.Thread | None = None


class ActorGang:
    """One job's placement group and its tasks' actors."""

    def __init__(self, job: JobSpec, token: str, bundles: list[dict[str, float]], strategy: str,
                 placement: Placement, run_dir: Callable[[], Path]) -> None:
        self.job = job
        self.token = token
        self.bundles = bundles
        self.strategy = strategy
        self.placement = placement
        self._run_dir = run_dir
        self.order: list[str] = []
        self.pg: Any = None
        self.runners: dict[str, Runner] = {}
        self.lock = threading.Lock()
        #: runtime_env of each actor (when not given at ray.init).
        self.actor_env: dict[str, Any] = {}
        self._replacing = threading.Lock()
        self._made = 0

    def place(self, order: list[str], timeout: float) -> bool:
        """Ask for the placement group (one bundle per task of ``order``); whether Ray placed
        it within ``timeout`` seconds."""
        self.order = list(order)
        self.pg = placement_group(self.bundles, strategy=self.strategy,
                                  name=f"tfdist-{self.job.name}-{os.getpid()}")
        try:
            ray.get(self.pg.ready(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            return False
        return True

    def new_actor(self, name: str, bundle: int) -> Any:
        """An actor for task ``name`` in ``bundle``. Its mark (procs.TOKEN_VAR) is its own,
        ``TOKEN/NAME/aN``: when an old actor of the task dies, its guardian kills what carries
        the old actor's mark, never the attempt its replacement runs (on the test bed, where
        every host shares one process table, a healed host's dying actor killed the attempt
        its replacement had just started on another host)."""
        b = self.bundles[bundle]
        self._made += 1
        cls = ray.remote(ray_actor.TaskRunner)
        return cls.options(
            name=f"tfdist-{self.job.name}-{name}-{os.getpid()}-{time.monotonic_ns()}",
            num_cpus=b.get("CPU", 0.0),
            num_gpus=b.get("GPU", 0.0),
            max_concurrency=4,
            max_restarts=0,
            runtime_env=self.actor_env or None,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=bundle
            ),
        ).remote(name, f"{self.token}/{name}/a{self._made}")

    def launch(self) -> dict[str, Any]:
        """An actor for every task, known at once (so :meth:`end` kills them even if they never
        answer); returns each one's reference to the address it reports."""
        actors = {name: self.new_actor(name, i) for i, name in enumerate(self.order)}
        with self.lock:
            for name in self.order:
                self.runners[name] = Runner(name, actors[name], {})
        return {name: actor.address.remote() for name, actor in actors.items()}

    def record(self, infos: dict[str, dict[str, Any]] | None = None) -> None:
        """Take the actors' reports (``infos``, at reservation) and write where each task runs
        to ``ray_placement.json``, for people and tests."""
        with self.lock:
            for name, info in (infos or {}).items():
                self.runners[name].info = info
            tasks = {r.name: r.info for r in self.runners.values()}
        with contextlib.suppress(OSError):
            (self._run_dir() / "ray_placement.json").write_text(
                json.dumps({"placement": self.job.ray.placement, "tasks": tasks}, indent=2) + "\n")

    def settle(self, closing: Callable[[], bool]) -> None:
        """Before any task of a restart starts: wait until Ray has settled every actor a stop
        got no answer from (dead with its node, or reachable again), at most
        :data:`UNAVAILABLE_LIMIT` s. A host cut off answers nothing until Ray's health checks
        declare its node dead (``health_check_*``, ~50 s by default) and re-place its
        bundles; a task started before that would get TF_CONFIG's old map while its moved
        peer gets the new one, and the attempt would be lost. Runs in the pump thread, so
        the supervisor is not held up meanwhile."""
        deadline = time.monotonic() + UNAVAILABLE_LIMIT
        for runner in list(self.runners.values()):
            pump = runner.unanswered
            while (pump is not None and pump is not threading.current_thread() and pump.is_alive()
                   and not closing() and time.monotonic() < deadline):
                pump.join(timeout=0.5)

    def replace_dead(self) -> None:
        """Before any task of a restart starts: a new actor for every task whose actor died
        (see :meth:`renew`), so that all of the round's tasks get the same cluster map."""
        with self._replacing:
            for runner in [r for r in self.runners.values() if r.dead]:
                self.renew(runner)

    def renew(self, runner: Runner) -> str | None:
        """A new actor for ``runner`` in its bundle, wherever Ray now places that bundle (its
        node may be gone, and the bundle moved to another node). When it lands on another
        address, TF_CONFIG's cluster map changes for every task started from now on: a
        restart after a lost node restarts the whole group under MultiWorkerMirrored, so no
        running task keeps the old map. Returns why there is no new actor, or None."""
        actor = self.new_actor(runner.name, self.order.index(runner.name))
        old = self.placement.address(runner.name) or ""
        info = None
        for port in dict.fromkeys([int(old.rpartition(":")[2]) if old else 0, 0]):  # the same port if free
            try:
                info = ray.get(actor.address.remote(port), timeout=120)
                break
            except (ray.exceptions.RayError, OSError) as err:
                problem = f"no replacement actor: {first_line(err)}"
        if info is None:
            return problem
        runner.actor, runner.info, runner.dead = actor, info, False
        if old:
            self.placement.move(runner.name, f"{info['ip']}:{info['port']}")
        self.record()
        return None

    def replace(self, runner: Runner, task: Task) -> str | None:
        """A start found its actor dead (its node died after the round began): a new actor.
        If the task moved, the others of this round have the old map, so this attempt is
        lost (not final: the policy's next restart of the group gets the new map)."""
        with self._replacing:
            problem = self.renew(runner)
        now = self.placement.address(runner.name)
        if problem is None and task.address and now != task.address:
            problem = f"its bundle moved from {task.address} to {now}; the next start has the new address"
        return problem

    def death_reason(self, runner: Runner, err: Exception, alive: Collection[object]) -> str:
        """Why ``runner``'s actor is gone (``alive``: the cluster's live node ids)."""
        node = runner.info.get("node_id")
        text = str(err).lower()
        if (node and node not in alive) or "node has died" in text or "node died" in text:
            there = sorted(r.name for r in self.runners.values() if r.info.get("node_id") == node)
            return (f"node died: host {runner.info.get('hostname')} ({runner.info.get('ip')}); this "
                    f"job's tasks on it: {', '.join(there) or runner.name}")
        if isinstance(err, ray.exceptions.ActorUnavailableError):
            return f"actor unreachable for {UNAVAILABLE_LIMIT:g}s"
        return f"actor died: {first_line(err)}"

    def end(self) -> None:
        """Every actor told to shut down (10 s at most), then killed; the group removed."""
        with self.lock:
            runners = list(self.runners.values())
        if runners:
            refs = [r.actor.shutdown.remote() for r in runners]
            with contextlib.suppress(ray.exceptions.RayError):
                ray.wait(refs, num_returns=len(refs), timeout=10)
            for r in runners:
                with contextlib.suppress(Exception):
                    ray.kill(r.actor)
        if self.pg is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self.pg)
            self.pg = None
        with self.lock:
            self.runners.clear()


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__

"""Tasks as subprocesses of Ray actors, gang-placed on a Ray cluster.

One actor per task (see :mod:`tfdist.backends.ray.actor`), each in its own bundle of one
placement group, so the job gets all its places at once or none (``job.ray.placement``:
spread -> SPREAD, strict-spread -> STRICT_SPREAD, pack -> PACK). Each actor holds a port on
its node and reports ``ip:port``; the supervisor builds TF_CONFIG from those, exactly as for
local tasks. The actor runs the task's command in its own process group; one driver thread
per task long-polls the actor, so output lines arrive in batches and an exit arrives within
one round trip.

Failing fast instead of waiting forever: :meth:`RayBackend.check` compares the gang with the
nodes the cluster has (the run directory is not even made when it cannot fit), and
:meth:`RayBackend.reserve` waits for the placement group only ``placement_timeout`` seconds
(the cluster may be busy with other jobs) before it gives up and says what is free.

The actors' own life (the placement group, making them, replacing the dead, ending them) is
:mod:`tfdist.backends.ray.gang`; this module runs the job's attempts on them. Ray is imported
here and there only; the registry imports this module when ``--backend ray`` is asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray

from tfdist.backends.agent import ship
from tfdist.backends.agent.placement import Placement
from tfdist.backends.base import Backend, BackendOptions, Exited, Progress, Started, line_events, lost_events
from tfdist.backends.ray import actor as ray_actor
from tfdist.backends.ray.gang import UNAVAILABLE_LIMIT, ActorGang, Runner, first_line
from tfdist.backends.ray.plan import (
    PLACEMENT_STRATEGIES,
    bundles_for,
    describe,
    gang_problem,
    parse_address,
    plain_resources,
    runtime_env_for,
)
from tfdist.backends.ray.plan import placement_timeout as ray_placement_timeout
from tfdist.cluster import Task, TaskId, needs_address, task_ids
from tfdist.errors import BackendError, SpecError
from tfdist.jobspec.model import JobSpec
from tfdist.node import leave_program, procs, spares
from tfdist.pyenv.plan import ray_packages

#: How long a task's death by a signal waits for its actor to answer (see _died_with_its_node).
SIGNAL_CHECK_SECONDS = 60.0

# Ship the actor's code by value (with its warm spares', its data's and what they import): the
# cluster's nodes need not have tfdist installed.
for _shipped in (*ship.by_value(), ray_actor):
    ray.cloudpickle.register_pickle_by_value(_shipped)


class RayBackend(Backend):
    """Run every task in a Ray actor's subprocess, all actors in one placement group."""

    name = "ray"
    keeps_spares = True
    stages_data = True

    def __init__(
        self,
        job: JobSpec,
        options: BackendOptions | None = None,
        placement_timeout: float | None = None,
    ) -> None:
        super().__init__(job, options)
        self.address = self.options.ray_address or job.ray.address or os.environ.get("RAY_ADDRESS") or None
        #: Where the address came from, for the errors that name it.
        self._address_field = ("--ray-address" if self.options.ray_address
                               else "ray.address" if job.ray.address else "RAY_ADDRESS")
        self.placement_timeout = (float(placement_timeout) if placement_timeout is not None
                                  else ray_placement_timeout(os.environ))
        self._connected = False  # did tfdist call ray.init (so it must disconnect)?
        #: Marks every process of this job on every node (procs.TOKEN_VAR).
        self.token = f"{job.name}-{secrets.token_hex(6)}"
        self._tasks = task_ids(job)
        self._bundles = bundles_for(job, self._tasks)
        self._closing = False
        self._ship_workdir = job.ray.working_dir  # tasks start in the uploaded copy
        #: Each training task's host:port, as TF_CONFIG has it (moved by a replacement actor).
        self._placement = Placement(job)
        self._gang = ActorGang(job, self.token, self._bundles, PLACEMENT_STRATEGIES[job.ray.placement],
                               self._placement, lambda: self.run_dir)
        self._runners = self._gang.runners
        self._filled = 0.0  # when the actors were last told to fill their spares (monotonic)

    # -- connecting and checking -------------------------------------------------------

    def _where(self) -> str:
        return self.address or "the local Ray (ray.init's default)"

    def _connect(self) -> None:
        if ray.is_initialized():
            # The caller's own connection: use it, leave it open. Ray uploads a working_dir
            # only at ray.init, so tasks start in job.workdir as it is on the nodes; pip
            # requirements still apply, per actor.
            self._ship_workdir = False
            packages = ray_packages(self.job)
            self._gang.actor_env = {"pip": packages} if packages else {}
            return
        address = self.address
        if address and address != "auto":  # HOST:PORT, or a Ray client's ray://HOST:PORT
            # Nothing is started on either refusal, so both are bad input (exit 2), as a
            # Spark master that does not answer is.
            try:
                host, port = parse_address(address.removeprefix("ray://"))
            except ValueError as err:
                raise SpecError(f"{self._address_field} {address}: {err}") from None
            try:  # Ray itself retries for minutes; a refused TCP connect says it in a moment
                with socket.create_connection((host, port), timeout=5):
                    pass
            except OSError as err:
                raise SpecError(
                    f"{self._address_field} {address}: no Ray cluster answers there ({err.strerror or err}); "
                    "start one with `ray start --head` or give the address of a running cluster"
                ) from None
        if Path(self.job.workdir).is_dir() is False and self.job.ray.working_dir:
            raise SpecError(f"workdir: {self.job.workdir} does not exist or is not a directory")
        try:
            ray.init(
                address=address,
                runtime_env=runtime_env_for(self.job, self.options.runs_root) or None,
                namespace=f"tfdist-{self.job.name}",
                log_to_driver=False,
                logging_level=logging.WARNING,
                include_dashboard=False if not address else None,
            )
        except ConnectionError as err:
            raise BackendError(f"--ray-address {self._where()}: cannot connect: {err}") from None
        except (ValueError, RuntimeError) as err:  # bad address, working_dir too large, ...
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise BackendError(f"ray ({self._where()}): {first}") from None
        self._connected = True
        self._ship_workdir = self.job.ray.working_dir
        _cluster_messages_to_stderr()

    def _nodes(self) -> list[dict[str, Any]]:
        return [n for n in ray.nodes() if n.get("Alive")]

    def _cluster_text(self) -> str:
        nodes = self._nodes()
        shown = "; ".join(
            f"{n.get('NodeManagerAddress')}: {describe(plain_resources(n.get('Resources', {})))}"
            for n in nodes[:8]
        )
        more = f"; and {len(nodes) - 8} more" if len(nodes) > 8 else ""
        return f"{len(nodes)} node(s) ({shown}{more})"

    def _asked_text(self) -> str:
        kinds: dict[str, int] = {}
        for b in self._bundles:
            kinds[describe(b)] = kinds.get(describe(b), 0) + 1
        each = ", ".join(f"{n} x {{{k}}}" for k, n in kinds.items())
        return f"{len(self._bundles)} tasks ({each}) with placement {self.job.ray.placement}"

    def check(self) -> None:
        try:
            self._connect()
            nodes = [plain_resources(n.get("Resources", {})) for n in self._nodes()]
            problem = gang_problem(self._bundles, self._gang.strategy, nodes)
            if problem:
                raise SpecError(
                    f"the Ray cluster at {self._where()} cannot fit the job: it asks for "
                    f"{self._asked_text()}; {problem}. The cluster has {self._cluster_text()}. "
                    "Ask for fewer tasks or cpus, another placement, or a bigger cluster"
                )
        except BaseException:
            self.close()
            raise

    # -- reserving: placement group, actors, addresses ---------------------------------

    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        if not ray.is_initialized():
            self._connect()
        if not self._gang.place([t.name for t in self._tasks], self.placement_timeout):
            free = plain_resources(ray.available_resources())
            raise BackendError(
                f"the Ray cluster at {self._where()} did not place the job within "
                f"{self.placement_timeout:g}s: it asks for {self._asked_text()}; free now: "
                f"{describe(free)} (the cluster has {self._cluster_text()}); other jobs may hold "
                "the rest, try again later (TFDIST_RAY_PLACEMENT_TIMEOUT sets the wait)"
            )
        refs = self._gang.launch()
        wait = 120.0 + (900.0 if ray_packages(self.job) else 0.0)  # pip installs take their time
        try:
            infos = dict(zip(refs, ray.get(list(refs.values()), timeout=wait), strict=True))
        except ray.exceptions.GetTimeoutError:
            raise BackendError(
                f"ray: the task actors did not start within {wait:g}s on {self._where()}"
            ) from None
        except (ray.exceptions.RayError, OSError) as err:
            raise BackendError(f"ray: the task actors did not start: {_explain(err)}") from None
        self._gang.record(infos)
        wanted = {t.name for t in tasks}
        self._placement.take({
            name: f"{info['ip']}:{info['port']}"
            for name, info in infos.items()
            if name in wanted and needs_address(TaskId.parse(name))
        })
        return self._placement.addresses

    # -- running ---------------------------------------------------------------------

    def start(self, task: Task, attempt: int) -> None:
        with self._gang.lock:
            runner = self._runners[task.name]
            runner.attempt = attempt
            runner.done.clear()
        cwd = None if self._ship_workdir else str(Path(self.job.workdir).resolve())
        if not task.gpus and "CUDA_VISIBLE_DEVICES" not in task.env:
            # Ray sets it for actors with GPUs; without, TensorFlow would see every GPU.
            task = dataclasses.replace(task, env={**task.env, "CUDA_VISIBLE_DEVICES": ""})
        data = self.data_env(task.name)
        if data:  # the actor stages it on its node (tfdist.node.staging), in this pump's call
            task = dataclasses.replace(task, env={**task.env, **data})
        runner.pump = threading.Thread(
            target=self._pump, args=(runner, task, attempt, cwd), name=f"ray-{task.name}", daemon=True
        )
        runner.pump.start()

    def _prepare(self, task: Task) -> Task:
        """The task as it starts now: replacement actors made (once Ray settled the actors a
        stop got no answer from), TF_CONFIG on today's map."""
        self._gang.settle(lambda: self._closing)
        self._gang.replace_dead()
        if self._placement.moved:
            task = dataclasses.replace(task, env=self._placement.retarget(dict(task.env)))
        return task

    def _pump(self, runner: Runner, task: Task, attempt: int, cwd: str | None) -> None:
        name = task.name
        spare = spares.shipped(task.command, self.job.workdir) if self.job.restart.warm_spares else None
        leave = leave_program.plan(task.command, self.job.strategy, task.role, self.job.drain_seconds,
                                   "source")  # MultiWorkerMirrored tasks leave together
        try:
            task = self._prepare(task)
            if self._closing:  # closed while it waited for Ray (Ctrl-C): start nothing
                return
            try:
                reply = ray.get(runner.actor.start.remote(attempt, task.command, task.env, cwd, spare, leave))
            except ray.exceptions.RayActorError:
                problem = self._gang.replace(runner, task)
                if problem:
                    self._lost(runner, attempt, f"node died; {problem}")
                    return
                reply = ray.get(runner.actor.start.remote(attempt, task.command, task.env, cwd, spare, leave))
            if "error" not in reply:
                moved = self._placement.moved_address(name)
                self.events.put(
                    Started(name, attempt, reply["time"], reply["pid"], runner.info["ip"], moved)
                )
            unavailable_since = None
            while True:
                try:
                    got = ray.get(runner.actor.poll.remote(attempt, ray_actor.POLL_SECONDS))
                    unavailable_since = None
                except ray.exceptions.ActorUnavailableError:
                    # The connection broke; Ray says whether the actor died (its node too)
                    # once the cluster has noticed, which takes its health-check period.
                    unavailable_since = unavailable_since or time.monotonic()
                    if self._closing or time.monotonic() - unavailable_since > UNAVAILABLE_LIMIT:
                        raise
                    time.sleep(0.5)
                    continue
                events = [e for stamp, line in got["lines"] for e in line_events(name, attempt, stamp, line)]
                for event in events:
                    self.events.put(event)
                if self.job.restart.warm_spares and any(isinstance(e, Progress) for e in events):
                    self._fill_spares()
                if got["exit"] is not None:
                    code, ended = got["exit"]
                    killed = code < 0 and not self._closing
                    gone = self._died_with_its_node(runner, attempt) if killed else None
                    if gone:
                        runner.dead = True
                        self._lost(runner, attempt, gone)
                    else:
                        self.events.put(Exited(name, attempt, ended, code))
                    return
                if got["gone"]:
                    return
        except ray.exceptions.RayError as err:
            if not self._closing:
                runner.dead = True
                self._lost(runner, attempt, self._death_reason(runner, err))
        finally:
            runner.done.set()

    def _died_with_its_node(self, runner: Runner, attempt: int) -> str | None:
        """Why a task killed by a signal is gone, when its node died: a node's end kills the
        actor's task first, and the actor may report that exit (-9) before Ray says the actor
        and its node are gone. So ask the actor again: a live one answers at once (the exit
        stands: a stop's SIGTERM, a kill for memory); a dead one's error, once Ray knows,
        names the node (at most SIGNAL_CHECK_SECONDS, after which the exit stands)."""
        try:
            ray.get(runner.actor.poll.remote(attempt, 0.0), timeout=SIGNAL_CHECK_SECONDS)
        except ray.exceptions.GetTimeoutError:
            pass
        except ray.exceptions.RayError as err:
            return self._death_reason(runner, err)
        return None

    def _death_reason(self, runner: Runner, err: Exception) -> str:
        """Why ``runner``'s actor is gone, against the cluster's live nodes now."""
        alive = {n.get("NodeID") for n in self._nodes()} if ray.is_initialized() else set()
        return self._gang.death_reason(runner, err, alive)

    def _fill_spares(self) -> None:
        """The job trains (under PSS only the chief says so): each actor makes its missing spare."""
        if time.monotonic() - self._filled >= 1.0:
            self._filled = time.monotonic()
            for runner in [r for r in list(self._runners.values()) if not r.dead]:
                runner.actor.fill.remote()  # fire and forget, once a second at most

    def _lost(self, runner: Runner, attempt: int, reason: str, *, final: bool = False) -> None:
        for event in lost_events(runner.name, attempt, time.time(), reason, final=final):
            self.events.put(event)

    def _signal(self, runners: Sequence[Runner], signum: int) -> None:
        refs = [r.actor.signal.remote(signum) for r in runners]
        with contextlib.suppress(ray.exceptions.RayError):
            ray.wait(refs, num_returns=len(refs), timeout=10)

    def stop(self, names: list[str], grace: float) -> None:
        with self._gang.lock:
            runners = [self._runners[n] for n in names if n in self._runners]
        for runner in procs.stop_in_order(runners, self._signal, lambda r: r.done, grace, last_wait=15):
            runner.unanswered = runner.pump  # it ends when Ray settles the actor

    def close(self) -> None:
        with self._gang.lock:
            names = list(self._runners)
        if names:
            self.stop(names, 0)
        self._closing = True
        self._gang.end()
        if self._connected:
            with contextlib.suppress(Exception):
                ray.shutdown()
            self._connected = False


def _cluster_messages_to_stderr() -> None:
    """Ray prints cluster errors (e.g. a raylet that died) on the driver's stdout; tfdist's
    stdout is the job's console and ``--json`` summary, so send them to stderr."""
    worker = ray._private.worker
    original = worker.print_to_stdstream
    if getattr(original, "_tfdist", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr._tfdist = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def _explain(err: BaseException) -> str:
    """The first line of a Ray error and the lines that say what went wrong (pip's ERROR)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    said = [ln for ln in lines[1:] if "ERROR" in ln or "No matching distribution" in ln]
    said = said or lines[-1:][: len(lines) - 1]  # else the last line, if there is more than one
    return "; ".join([first_line(err), *dict.fromkeys(said[-2:])])[:600]

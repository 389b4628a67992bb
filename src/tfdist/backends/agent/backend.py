"""What the Spark and YARN backends share: tasks run by tfdist's agents, driven over one channel.

Both backends put one agent (:mod:`tfdist.node.agent`, stdlib only) wherever a task
runs; it connects back to this process's authenticated channel
(:mod:`tfdist.backends.agent.channel`), holds the task's port, runs, restarts and signals the
task's process group on command, and streams output and the exit back the moment they happen.
:class:`AgentBackend` is that driving: it turns the agents' reports into the supervisor's
events, and the supervisor's start/stop into commands to the agents.

What differs is how agents are obtained and lost, and a subclass says only that: Spark runs
every agent in one barrier stage, so a lost agent dooms the stage and a restart waits for a
new stage's agents (maybe on other hosts, with a new TF_CONFIG); YARN runs each in its own
container, which the distributed shell relaunches in place (the same address) or, when its
node was lost, replaces on another node (a new address, and a new TF_CONFIG for the tasks
that restart).

Warm spares (``restart.warm_spares``): each agent holds its own task's spare
(:mod:`tfdist.node.spares`). The driver ships what the spare needs with the task
(:meth:`AgentBackend._spare_of`: the spare program's source, the script's imports read here)
and relays that the job trains: a progress report from any task (in a parameter-server job
only the chief reports) makes it tell every agent to ``fill``.
"""

from __future__ import annotations

import secrets
import threading
import time
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from tfdist.backends.agent.channel import AgentLink, Channel
from tfdist.backends.agent.placement import Placement, reported
from tfdist.backends.base import (
    Active,
    Backend,
    BackendOptions,
    Exited,
    Output,
    Progress,
    Started,
    Usage,
    line_events,
    lost_events,
)
from tfdist.cluster import Task, task_ids
from tfdist.errors import BackendError
from tfdist.jobspec.model import JobSpec
from tfdist.node import leave_program, procs

#: Seconds an agent has to connect once its place is there (slots given, container relaunched).
AGENT_WAIT = 180.0
#: The agents are told ``fill`` (make missing spares) at most this often while the job reports.
FILL_EVERY = 1.0


def usage_event(name: str, attempt: int, when: float, msg: dict[str, Any]) -> Usage | None:
    """An agent's usage message as the event, or None when its figures are not figures
    (an agent is node code the driver does not trust blindly)."""
    cpu, rss = msg.get("cpu"), msg.get("rss")
    if isinstance(rss, bool) or not isinstance(rss, int) or rss < 0:
        return None
    if cpu is not None and (isinstance(cpu, bool) or not isinstance(cpu, int | float)
                            or not 0 <= cpu < 1e6):
        return None
    return Usage(name, attempt, when, None if cpu is None else float(cpu), rss)


class AgentRunner:
    """The driver's view of one task: its current attempt and whether it has ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.attempt = -1
        self.done = threading.Event()
        self.done.set()
        #: The agent the current attempt runs under; None while one is awaited.
        self.link: AgentLink | None = None


class AgentBackend(Backend):
    """Run every task under an agent; subclasses say where agents run and how they are replaced.

    A subclass creates :attr:`_channel` in ``reserve`` (with :meth:`_on_message` as its
    callback), waits there for every agent and calls :meth:`_take_addresses`, and fills in
    the hooks below: :meth:`_agent_dropped`, :meth:`_await_agent`, :meth:`_agent_problem` and
    :meth:`_move_to` (and, if it needs to, :meth:`_attempt_env`). Where the tasks are is
    :attr:`_placement` (:class:`~tfdist.backends.agent.placement.Placement`): a subclass's
    ``_move_to`` adopts its new agents' addresses there, and every attempt started after
    that gets TF_CONFIG's new cluster map.
    """

    #: The reason a restart ends for good when no new agent comes: ``"<this>: <why>"``.
    _no_new_agent = "no agent to restart it on"
    keeps_spares = True
    #: The agent stages a task's inputs and keeps its outputs where it runs (node.staging).
    stages_data = True

    def __init__(self, job: JobSpec, options: BackendOptions | None = None) -> None:
        super().__init__(job, options)
        self._tasks = task_ids(job)
        self._names = [t.name for t in self._tasks]
        #: Marks every process of this job on every host (procs.TOKEN_VAR).
        self.token = f"{job.name}-{secrets.token_hex(6)}"
        self._secret = secrets.token_hex(32)
        self._channel: Channel | None = None
        self._runners = {n: AgentRunner(n) for n in self._names}
        #: Each task's ``host:port`` as TF_CONFIG has it, and its cluster map after a move.
        self._placement = Placement(job)
        self._closing = False
        self._filled = 0.0  # when the agents were last told to fill their spares (monotonic)

    # -- the hooks: how agents are obtained and lost -------------------------------------

    @abstractmethod
    def _agent_dropped(self, runner: AgentRunner, link: AgentLink) -> None:
        """``link``'s connection ended while ``runner``'s attempt ran under it (not at
        tfdist's word): report what is lost."""

    @abstractmethod
    def _await_agent(self, name: str) -> str | None:
        """Wait until task ``name`` can have a new agent; None, or why it will have none."""

    @abstractmethod
    def _agent_problem(self, name: str, link: AgentLink) -> str | None:
        """Why task ``name`` cannot run on its new agent ``link`` (None: it can)."""

    @abstractmethod
    def _move_to(self, name: str, link: AgentLink, message: dict[str, Any]) -> str:
        """Take the new agent ``link`` as task ``name``'s (``message``, the start command, may
        be changed for it); returns the line that tells the task's log so."""

    def _attempt_env(self, task: Task) -> dict[str, str]:
        """The environment an attempt starts with: TF_CONFIG names the job's current addresses."""
        return self._placement.retarget(dict(task.env))

    def _start_env(self, task: Task) -> dict[str, str]:
        """What a start message carries: the attempt's environment and the task's data plan
        (the agent stages it: tfdist.node.staging)."""
        return {**self._attempt_env(task), **self.data_env(task.name)}

    def _leave_of(self, role: str, carry: str) -> dict[str, Any] | None:
        """How an agent of ``role`` starts its task so that MultiWorkerMirrored tasks leave
        together (tfdist.node.leave_program.plan; ``carry``: how the node finds the program),
        or None: the command runs as it is."""
        command = self.job.command_for(role)
        return leave_program.plan(command, self.job.strategy, role, self.job.drain_seconds, carry)

    # -- warm spares ----------------------------------------------------------------------

    def _spare_of(self, role: str, program: bool = True) -> dict[str, Any]:
        """What an agent of ``role`` ships to hold a warm spare (``{"spare": ...}``), or nothing
        (no ``restart.warm_spares``, or a command a spare cannot run: see spares.plan).
        ``program``: ship the spare program's text (else the agent reads its own copy)."""
        if not self.job.restart.warm_spares:
            return {}
        from tfdist.node import spares

        spare = spares.shipped(self.job.command_for(role), self.job.workdir, program)
        return {"spare": spare} if spare is not None else {}

    def _fill_spares(self) -> None:
        """The job trains: every agent makes its task's spare if it is missing."""
        now = time.monotonic()
        if self._channel is None or now - self._filled < FILL_EVERY:
            return
        self._filled = now
        for name in self._names:
            link = self._channel.link(name)
            if link is not None and link.alive and not link.closing:
                link.send({"op": "fill"})

    # -- what the agents report -------------------------------------------------------

    def _agent_infos(self) -> dict[str, dict[str, Any]]:
        """What each task's current agent reported when it connected (host, port, where it runs)."""
        assert self._channel is not None
        return {n: lk.info for n in self._names if (lk := self._channel.link(n)) is not None}

    def _take_addresses(self) -> dict[str, dict[str, Any]]:
        """Once every agent is there: their addresses become the job's; returns their reports.
        An agent that could not hold its port fails the reservation."""
        infos = self._agent_infos()
        errors = [f"{n}: {i['error']}" for n, i in infos.items() if "error" in i]
        if errors:
            raise BackendError(f"{self.name}: {'; '.join(errors)}")
        self._placement.take(reported(infos))
        return infos

    def _on_message(self, name: str, msg: dict[str, Any] | None) -> None:
        runner = self._runners[name]
        if msg is None:
            self._connection_ended(name)
            return
        attempt = msg.get("attempt")
        when = float(msg.get("time", time.time()))
        if not isinstance(attempt, int):
            return
        ev = msg.get("ev")
        if ev == "lines":
            trained = False
            for line in msg.get("lines", []):
                for event in line_events(name, attempt, when, str(line)):
                    trained = trained or isinstance(event, Progress)
                    self.events.put(event)
            if trained and self.job.restart.warm_spares:
                self._fill_spares()
        elif ev == "active":
            self.events.put(Active(name, attempt, when))
        elif ev == "started":
            link = self._channel.link(name) if self._channel else None
            host = link.info.get("host") if link else None
            self.events.put(Started(name, attempt, when, msg.get("pid"), host,
                                       self._placement.moved_address(name)))
        elif ev == "usage":
            sample = usage_event(name, attempt, when, msg)
            if sample is not None:
                self.events.put(sample)
        elif ev == "exit" and attempt == runner.attempt and not runner.done.is_set():
            runner.done.set()
            if msg.get("error"):
                self.events.put(Output(name, attempt, when, f"tfdist: {msg['error']}"))
            self.events.put(Exited(name, attempt, when, int(msg.get("code", 1))))

    def _connection_ended(self, name: str) -> None:
        """Task ``name``'s agent connection ended, not at tfdist's word (it dropped, or went
        silent: see the channel): a loss if the current attempt runs under it."""
        runner = self._runners[name]
        link = runner.link
        if not self._closing and not runner.done.is_set() and link is not None and not link.alive:
            self._agent_dropped(runner, link)

    def _lost(self, runner: AgentRunner, attempt: int, reason: str, *, final: bool = False) -> None:
        if runner.done.is_set() or attempt != runner.attempt:
            return
        runner.done.set()
        for event in lost_events(runner.name, attempt, time.time(), reason, final=final):
            self.events.put(event)

    # -- what the supervisor asks -----------------------------------------------------

    def start(self, task: Task, attempt: int) -> None:
        runner = self._runners[task.name]
        runner.attempt = attempt
        runner.done.clear()
        message = {"op": "start", "attempt": attempt, "env": self._start_env(task)}
        link = self._channel.link(task.name) if self._channel else None
        runner.link = link
        if link is not None and link.alive and not link.closing and link.send(message):
            return
        runner.link = None
        threading.Thread(target=self._start_on_new_agent, args=(runner, message),
                         name=f"{self.name}-{task.name}", daemon=True).start()

    def _start_on_new_agent(self, runner: AgentRunner, message: dict[str, Any]) -> None:
        """The attempt's agent is gone: wait for the one that takes its place, then start there."""
        attempt = message["attempt"]
        assert self._channel is not None
        why = self._await_agent(runner.name)
        if runner.attempt != attempt:
            return  # a later attempt was asked for meanwhile: its own wait starts it
        link = self._channel.link(runner.name)
        if why or link is None:
            self._lost(runner, attempt, f"{self._no_new_agent}: {why}", final=True)
            return
        runner.link = link
        problem = self._agent_problem(runner.name, link)
        if problem:
            self._lost(runner, attempt, problem, final=True)
            return
        moved = self._move_to(runner.name, link, message)
        self.events.put(Output(runner.name, attempt, time.time(), moved))
        if not link.send(message):
            self._lost(runner, attempt, "the new agent's connection dropped")

    def _signal(self, runners: Sequence[AgentRunner], signum: int) -> None:
        for r in runners:
            link = self._channel.link(r.name) if self._channel else None
            if link is None or not link.send({"op": "signal", "signum": signum}):
                self._lost(r, r.attempt, "its agent is gone")

    def stop(self, names: list[str], grace: float) -> None:
        runners = [self._runners[n] for n in names if n in self._runners]
        for r in procs.stop_in_order(runners, self._signal, lambda r: r.done, grace, last_wait=15):
            self._lost(r, r.attempt, "no exit reported 15 s after SIGKILL")

"""``--backend yarn``: one YARN container per task, with its role's own resources.

Each role is one YARN application (named ``tfdist-JOB-ROLE``, tagged with the job, in the
job's queue) run by Hadoop's distributed shell ApplicationMaster, which asks for the role's
containers (memory, vcores, ``yarn.io/gpu``) and starts tfdist's agent in each
(:mod:`tfdist.node.yarn_container`, shipped as a small zip in the environment). The agent is
the Spark backend's: it connects back to this process's channel
(:class:`tfdist.backends.agent.channel.Channel`, authenticated with the job's secret, which
travels as a YARN credential), holds the task's port, reports its host, and runs, restarts
and stops the task on command. So TF_CONFIG, restarts and teardown work as on Spark.

Faults: a task that exits is restarted by tfdist's policy inside the same container; a
container that dies (killed, OOM) is relaunched in place by the distributed shell
(``yarn.container_retries``) and the task's new agent takes over the same host and port; a
node lost with its containers is replaced by the distributed shell on the nodes left (it asks
the RM for a new container once the RM reports the old one lost with its node): the new
container's agent takes the task at a new address, and every task the policy restarts gets
a TF_CONFIG naming the new addresses; when the gang can no longer fit the nodes left, the
job fails saying so. A tfdist that dies drops the agents' connections and they end their
tasks and exit, so the applications finish; at every end tfdist kills through the RM
whatever is still live. An application still queued when tfdist dies has no agent yet: the
run's reaper (:mod:`tfdist.backends.yarn.reaper`, started before the first submission)
kills it through the RM.

The roles' applications go through the ResourceManager's REST API only
(:mod:`tfdist.backends.yarn.rest`); no Hadoop client, no JVM on this side. One more, the
job's (``tfdist-JOB``: its entry in YARN's UI, with TensorBoard as its tracking URL), has
this process as its unmanaged ApplicationMaster over Hadoop RPC (:mod:`.jobapp`); it is
never a condition of the job.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from tfdist import runs
from tfdist.backends.agent import ship
from tfdist.backends.agent import workdir as agent_workdir
from tfdist.backends.agent.backend import AGENT_WAIT, AgentBackend, AgentRunner
from tfdist.backends.agent.channel import AgentLink, Channel
from tfdist.backends.base import BackendOptions, Output
from tfdist.backends.yarn import jobapp, plan, reaper, rest
from tfdist.backends.yarn import spark as on_yarn
from tfdist.backends.yarn import workdir as yarn_workdir
from tfdist.cluster import Task, TaskId
from tfdist.errors import BackendError, SpecError, warn
from tfdist.jobspec.model import JobSpec
from tfdist.node import agent as node_agent
from tfdist.states import JobState

_PYTHON_PATH = r"^/[A-Za-z0-9_./+-]{1,500}$"
_NODE_POLL = 3.0  # seconds between looks at the RM's NodeManagers while the job runs
_WHY_LOOK = 3.0  # seconds a NodeManager is asked how a container whose agent dropped ended


class YarnBackend(AgentBackend):
    """Run every task under an agent in a YARN container of its role's application."""

    name = "yarn"
    _no_new_agent = "no new container to restart it in"

    def __init__(self, job: JobSpec, options: BackendOptions | None = None) -> None:
        super().__init__(job, options)
        self._rm: rest.ResourceManager | None = None
        self._asks: list[plan.RoleAsk] = []
        self._apps: dict[str, str] = {}  # role -> application id
        self._containers: dict[str, str] = {}
        self._python = job.yarn.python or sys.executable
        self._archive: Path | None = None  # the packed workdir (yarn.ship_workdir)
        self._staging: str | None = None  # the directory holding it, removed at close
        #: Tasks that cannot run again, and why (the gang no longer fits the nodes left).
        self._gone: dict[str, str] = {}
        #: (task, node) losses already announced; when the last node was given up on.
        self._announced: set[tuple[str, str]] = set()
        self._node_lost_at = 0.0
        self._moving = threading.Lock()  # new agents' addresses taken and recorded as one step
        #: The address each task's latest attempt was started at (to say when it moved).
        self._ran_at: dict[str, str] = {}
        #: What the agent of each task's latest attempt reported (its node: a lost node's tasks).
        self._ran_on: dict[str, dict[str, Any]] = {}
        #: The agent links taken (at reserve or by _move_to): sent the workdir, their address
        #: the job's. The links, not their ids: a new link may reuse a freed one's id.
        self._taken: weakref.WeakSet[AgentLink] = weakref.WeakSet()
        #: Kills the run's applications if this process ends without close() (SIGKILLed).
        self._reaper: reaper.Reaper | None = None
        #: The job's own application (its name, queue, tracking URL in YARN's UI) and outcome.
        self._jobapp: jobapp.JobApplication | None = None
        self._outcome: tuple[JobState, str] = (JobState.FAILED, "tfdist ended before the job did")

    # -- checking: before anything is submitted ------------------------------------------

    def check(self) -> None:
        import re

        if self.job.python.wanted:
            raise SpecError("python: the yarn backend runs tasks with yarn.python's packages; "
                            "drop python.requirements/requirements_file")
        if not re.match(_PYTHON_PATH, self._python):
            raise SpecError(f"yarn.python: '{self._python[:80]}' must be an absolute path of plain "
                            "characters (it travels on the NodeManager's command line)")
        if not re.match(r"^[A-Za-z0-9_.-]{1,200}$", self.job.yarn.queue):
            raise SpecError(f"yarn.queue: '{self.job.yarn.queue[:80]}' is not a queue name")
        if not Path(self.job.workdir).is_dir():
            where = "it is shipped from here" if self.job.yarn.ship_workdir else \
                "tasks start there on the NodeManagers' hosts"
            raise SpecError(f"workdir: {self.job.workdir} does not exist or is not a directory ({where})")
        if self.job.yarn.ship_workdir:
            agent_workdir.refuse_too_big(Path(self.job.workdir), self.options.runs_root, "yarn.ship_workdir")
        roles = []
        for role in dict.fromkeys(t.role for t in self._tasks):
            spec = self.job.role(role)
            count = sum(1 for t in self._tasks if t.role == role)
            roles.append((role, count, spec.resources.cpus, spec.resources.gpus, spec.resources.memory))
        self._asks = plan.role_asks(roles)
        rm = rest.ResourceManager.from_environ(timeout=5.0)
        try:
            rm.info()
            scheduler = rm.scheduler()
        except rest.RMError as err:
            raise SpecError(f"--backend yarn: the ResourceManager of HADOOP_CONF_DIR does not answer "
                            f"({err}); start it or point HADOOP_CONF_DIR at a running cluster") from None
        if plan.knows_limits(scheduler):
            limits = plan.queue_limits(scheduler, self.job.yarn.queue, {})
            if limits is None:
                raise SpecError(f"yarn.queue: the cluster has no leaf queue '{self.job.yarn.queue}'")
            problem = plan.fit_problem(self._asks, limits)
            if problem:
                raise SpecError(f"the job can never fit: {problem}; ask for less, or another yarn.queue")
        self._rm = rm

    # -- reserving: one application per role, then every agent ----------------------------

    def _classpath(self) -> str:
        """The ApplicationMaster's classpath: the cluster's own (``yarn.application.classpath``,
        where Hadoop installations keep the distributed shell's jar), as YARN's clients build it."""
        from tfdist.backends.yarn import conf as yarn_conf

        site = yarn_conf.read_site(yarn_conf.conf_dir(dict(os.environ)))
        default = ("$HADOOP_CONF_DIR,$HADOOP_COMMON_HOME/share/hadoop/common/*,"
                   "$HADOOP_COMMON_HOME/share/hadoop/common/lib/*,$HADOOP_YARN_HOME/share/hadoop/yarn/*,"
                   "$HADOOP_YARN_HOME/share/hadoop/yarn/lib/*")
        given = site.get("yarn.application.classpath") or default
        parts = [p.strip() for p in given.split(",") if p.strip()]
        return "<CPS>".join(["{{PWD}}", *parts])

    def _submit(self, host: str, port: int) -> None:
        assert self._rm is not None
        cwd = str(Path(self.job.workdir).resolve())
        shipped = [{"name": t.name, "role": t.role, "command": self.job.command_for(t.role),
                    "cwd": cwd, "python": self._python, "leave": self._leave_of(t.role, "node"),
                    **self._spare_of(t.role, program=False)}
                   for t in self._tasks]
        zipped = ship.build()
        tags = on_yarn.tags(self.job.name, self.token)
        facts = self._pack_workdir()
        try:
            self._reaper = reaper.Reaper(on_yarn.run_tag(self.token), self._rm.urls, self._rm.user,
                                         self.run_dir / "yarn-reaper.log")
        except OSError as err:
            raise BackendError(f"yarn: cannot start the reaper of this run's applications: {err}") from None
        for ask in self._asks:
            env = plan.container_env((host, port), self.token, ask.role, shipped, self._python, zipped, facts)
            try:
                app_id, _ = self._rm.new_application()
                self._apps[ask.role] = app_id
                self._rm.submit(plan.submission(
                    app_id, f"tfdist-{self.job.name}-{ask.role}", self.job.yarn.queue, tags, ask, env,
                    self._classpath(), self._secret, self.job.yarn.container_retries))
            except rest.RMError as err:
                raise BackendError(f"yarn: the RM refused {ask.role}'s application: {err}") from None
        # the job's own, last: in the queue it must not take the AM room the roles need first
        tensorboard = self.run_dir / runs.TENSORBOARD_URL  # its URL, while the run serves one
        self._jobapp = jobapp.JobApplication.submit(
            self._rm, f"tfdist-{self.job.name}", self.job.yarn.queue, tags, on_yarn.run_tag(self.token), host,
            lambda: jobapp.url_in(tensorboard), warn)
        self._write_record({})

    def _pack_workdir(self) -> dict[str, Any] | None:
        """The job's workdir packed once (when shipped); its size and SHA-256 go with the job."""
        if not self.job.yarn.ship_workdir:
            return None
        import tempfile

        self._staging = tempfile.mkdtemp(prefix="tfdist-yarn-")
        self._archive = Path(self._staging) / "workdir.tar.gz"
        try:
            return yarn_workdir.pack(Path(self.job.workdir), self._archive, [self.options.runs_root])
        except OSError as err:
            raise BackendError(f"yarn: cannot pack workdir {self.job.workdir}: {err}") from None

    def _ship_workdir(self, links: list[AgentLink]) -> None:
        """Send the packed workdir to these agents (each unpacks it before its first start;
        messages on one connection are handled in order)."""
        archive = self._archive
        if archive is None:
            return

        def one(link: AgentLink) -> None:
            for message in yarn_workdir.put_messages(archive):
                if not link.send(message):
                    return

        threads = [threading.Thread(target=one, args=(lk,), daemon=True) for lk in links]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _app_problem(self) -> str | None:
        """Why an application of this job ended or cannot run (checked while waiting)."""
        if self._rm is None:
            return None
        for role, app_id in self._apps.items():
            with contextlib.suppress(rest.RMError):
                app = self._rm.app(app_id)
                if app.get("state") in ("FAILED", "KILLED", "FINISHED"):
                    why = str(app.get("diagnostics") or "").strip().splitlines()
                    ended = f"{role}'s application {app_id} is {app['state']}: {(why or ['-'])[0][:300]}"
                    lost = self._on_lost_nodes()  # the usual cause: its AM's node was lost
                    return "; ".join([*(f"{n}: {w}" for n, w in sorted(lost.items())), ended])
        return None

    def _on_lost_nodes(self) -> dict[str, str]:
        """The tasks whose NodeManager the RM has given up on, and why (``{}`` when it cannot
        tell): where each one's latest attempt ran, even if a new agent of it came meanwhile."""
        if self._rm is None or self._channel is None:
            return {}
        return on_yarn.lost_tasks(self._rm, {n: self._where(n) for n in self._names})

    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        assert self._rm is not None
        host = node_agent.host_facing(_rm_address(self._rm))
        try:
            self._channel = Channel(host, self._secret, self._names, self._on_message,
                                    any_port_elsewhere=True)
        except OSError as err:
            raise BackendError(f"yarn: cannot listen for the task agents on {host}: {err}") from None
        self._submit(*self._channel.address)
        timeout = self.job.yarn.placement_timeout_seconds
        last = {"at": 0.0}
        seen: dict[str, str | None] = {"why": None}

        def stop() -> str | None:  # asks the RM at most every 2 s
            if time.monotonic() - last["at"] > 2:
                last["at"], seen["why"] = time.monotonic(), self._app_problem()
            return seen["why"]

        why = self._channel.wait(self._names, timeout, stop)
        if why and seen["why"]:
            raise BackendError(f"yarn: {seen['why']} (containers' logs: the run directory's yarn-logs/)")
        if why:
            waiting = self._queue_states()
            raise BackendError(f"yarn: the tasks did not all start in queue {self.job.yarn.queue} within "
                               f"{timeout:g}s ({why}; {waiting}); the queue may be busy: try again later "
                               "(yarn.placement_timeout_seconds sets the wait)")
        infos = self._take_addresses()
        self._ran_at, self._ran_on = self._placement.addresses, dict(infos)
        self._note(infos)
        first = [lk for n in self._names if (lk := self._channel.link(n)) is not None]
        self._taken.update(first)
        self._ship_workdir(first)
        threading.Thread(target=self._watch_nodes, name="yarn-nodes", daemon=True).start()
        return self._placement.reserved(tasks)

    def _watch_nodes(self) -> None:
        """While the job runs: the tasks on a NodeManager the RM has given up on (LOST after
        missed heartbeats, SHUTDOWN, ...) are named in one line with the node. Each of their
        containers is lost with it, and the distributed shell asks for a replacement on the
        nodes left, whose agent takes the task at a new address (see :meth:`_move_to`). An
        agent still running there (a NodeManager killed on its own leaves its containers'
        processes) is told to end its task. When the gang no longer fits the nodes left,
        those tasks cannot run again and the job fails saying so."""
        while not self._closing:
            time.sleep(_NODE_POLL)
            lost = {n: w for n, w in self._on_lost_nodes().items()
                    if (n, self._node_of(n)) not in self._announced}
            if lost:
                self._nodes_lost(lost)

    def _where(self, name: str) -> dict[str, Any]:
        """What the agent of the task's latest attempt reported (before one: its agent's)."""
        link = self._channel.link(name) if self._channel else None
        return self._ran_on.get(name) or (link.info if link else {})

    def _node_of(self, name: str) -> str:
        return str(self._where(name).get("node") or "")

    def _nodes_lost(self, lost: dict[str, str]) -> None:
        assert self._rm is not None
        self._node_lost_at = time.monotonic()
        by_node: dict[str, list[str]] = {}
        for name in lost:
            self._announced.add((name, self._node_of(name)))
            by_node.setdefault(self._node_of(name), []).append(name)
        try:
            unfit = plan.no_longer_fits(self._asks, self._rm.nodes())
        except rest.RMError:
            unfit = None
        for node, names in sorted(by_node.items()):
            info = self._where(names[0])
            host = f"host {info.get('hostname')} ({info.get('host')})" if info else "its host"
            then = unfit or "YARN replaces their containers on the nodes left and they restart there"
            line = "tfdist: " + plan.node_lost(node, host, lost[names[0]], names, then)
            first = self._runners[sorted(names)[0]]
            self.events.put(Output(first.name, first.attempt, time.time(), line))
            for name in names:
                if unfit:
                    self._gone[name] = unfit  # an attempt awaiting its container ends with this
                runner = self._runners[name]
                if runner.link is not None and str(runner.link.info.get("node") or "") == node:
                    self._lost(runner, runner.attempt, unfit or lost[name], final=bool(unfit))
                old = self._channel.link(name) if self._channel else None
                if old is not None and old.alive and str(old.info.get("node") or "") == node:
                    old.send({"op": "shutdown"})
                    old.close()

    def start(self, task: Task, attempt: int) -> None:
        runner = self._runners[task.name]
        why = self._gone.get(task.name)
        if why is not None:
            runner.attempt = attempt
            runner.done.clear()
            self._lost(runner, attempt, why, final=True)
            return
        if self._channel is not None and (self._missing_agents() or self._new_agents()):
            # a task awaits its new container, maybe at a new address, or its new agent came
            # before this restart: every start waits for the agents and starts with the
            # addresses of all, a new agent after it has the workdir (see _move_to)
            runner.attempt = attempt
            runner.done.clear()
            runner.link = None
            message = {"op": "start", "attempt": attempt, "env": self._start_env(task)}
            threading.Thread(target=self._start_on_new_agent, args=(runner, message),
                             name=f"yarn-{task.name}", daemon=True).start()
            return
        super().start(task, attempt)

    def _missing_agents(self) -> list[str]:
        """The tasks (that may still run) with no live agent."""
        assert self._channel is not None
        return [n for n in self._names if n not in self._gone
                and ((lk := self._channel.link(n)) is None or not lk.alive or lk.closing)]

    def _new_agents(self) -> list[str]:
        """The tasks whose live agent was not taken yet (a relaunched or replacement
        container's, connected before the restart that starts it there)."""
        assert self._channel is not None
        return [n for n in self._names if (lk := self._channel.link(n)) is not None and lk.alive
                and lk not in self._taken]

    def _queue_states(self) -> str:
        out = []
        for role, app_id in self._apps.items():
            with contextlib.suppress(rest.RMError):
                assert self._rm is not None
                app = self._rm.app(app_id)
                out.append(f"{role}: {app.get('state')} ({str(app.get('diagnostics') or '').strip()[:120]})")
        return "; ".join(out) or "no application state"

    def _note(self, infos: dict[str, dict[str, Any]]) -> None:
        for info in infos.values():
            found = on_yarn.node_of(info)
            if found:
                self._containers[found[0]] = found[1]
        if self._rm is not None:
            for app_id in self._apps.values():
                self._containers.update(on_yarn.containers_of(self._rm, app_id))
        self._write_record(infos)

    def _write_record(self, infos: dict[str, dict[str, Any]]) -> None:
        keys = ("host", "port", "container", "node", "node_http", "hostname", "pid")
        record = {"queue": self.job.yarn.queue, "applications": self._apps,
                  "job_application": self._jobapp.app_id if self._jobapp else None,
                  "tasks": {n: {k: i.get(k) for k in keys} for n, i in infos.items()}}
        with contextlib.suppress(OSError, RuntimeError):
            (self.run_dir / "yarn_placement.json").write_text(json.dumps(record, indent=2) + "\n")

    # -- running: how agents are lost and replaced (the rest is AgentBackend's) -----------

    def _agent_dropped(self, runner: AgentRunner, link: AgentLink) -> None:
        assert self._channel is not None
        lost = plan.lost_container(link.info, link.ended, self._agent_infos())
        container, node_http = link.info.get("container"), link.info.get("node_http")
        if not container or not node_http:
            self._lost(runner, runner.attempt, lost)
            return
        threading.Thread(target=self._why_lost, name=f"yarn-why-{runner.name}", daemon=True,
                         args=(runner, runner.attempt, lost, str(node_http), str(container))).start()

    def _why_lost(self, runner: AgentRunner, attempt: int, lost: str, node_http: str, container: str) -> None:
        """Ask the container's NodeManager how it ended (it knows at once: the agent died of
        its kill): killed for memory is the root cause every backend gives, and final (YARN
        relaunches no container it killed); anything else (no answer, still running after
        _WHY_LOOK: a relaunch, a silent agent) is the loss ``lost`` says."""
        role = runner.name.rpartition("-")[0]
        memory_mb = next((a.memory_mb for a in self._asks if a.role == role), plan.DEFAULT_MEMORY_MB)
        deadline = time.monotonic() + _WHY_LOOK
        while True:
            got = rest.node_container(node_http, container)
            why = plan.memory_kill(got, memory_mb)
            if why:
                self._lost(runner, attempt, why, final=True)
                return
            if got is None or plan.exit_status(got) != plan.NOT_ENDED or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self._lost(runner, attempt, lost)

    # A restart after a container died: the distributed shell relaunches it in place (the
    # new agent holds the same host and port), or, when its node was lost, asks the RM for a
    # replacement on the nodes left (a new address there). Every start waits until each task
    # that may run has an agent, then starts with the addresses of all.

    def _await_agent(self, name: str) -> str | None:
        """Wait until every task that may still run has a live agent: at most AGENT_WAIT
        after the wait began or after the RM last gave up on a node (a replacement container
        is asked for only then), whichever is later. None, or why not."""
        assert self._channel is not None
        began = time.monotonic()
        asked: dict[str, Any] = {"at": 0.0, "why": None}

        def stop() -> str | None:
            missing = self._missing_agents()
            gone = [self._gone[n] for n in self._names if n in self._gone]
            if gone:
                return gone[0]
            if time.monotonic() - asked["at"] > 2:  # the RM at most every 2 s
                asked["at"], asked["why"] = time.monotonic(), self._app_problem()
            if asked["why"]:
                return str(asked["why"])
            if missing and time.monotonic() > max(began, self._node_lost_at) + AGENT_WAIT:
                return f"no container for {', '.join(missing)} within {AGENT_WAIT:g}s"
            return None

        return self._channel.wait([n for n in self._names if n not in self._gone], 24 * 3600.0, stop)

    def _agent_problem(self, name: str, link: AgentLink) -> str | None:
        return f"its new container: {link.info['error']}" if "error" in link.info else None

    def _move_to(self, name: str, link: AgentLink, message: dict[str, Any]) -> str:
        """Take the agents' addresses as the job's (a task on a replacement container has a
        new one) and start with a TF_CONFIG naming them; a new agent gets the workdir first."""
        assert self._channel is not None
        with self._moving:
            infos = self._agent_infos()
            self._placement.adopt(infos)
            self._note(infos)
            fresh = link not in self._taken
            self._taken.add(link)
            now = self._placement.address(name)
            before = self._ran_at.get(name, now)
            self._ran_at[name], self._ran_on[name] = str(now), link.info
        if fresh:
            self._ship_workdir([link])  # a relaunched or replacement container unpacks afresh
        message["env"] = self._placement.retarget(message["env"])
        if fresh and now != before:
            return (f"tfdist: {name} moved to container {link.info.get('container')} on node "
                    f"{link.info.get('node')} (host {link.info.get('hostname')}), {now} (was {before})")
        if fresh:
            return f"tfdist: {name} runs in a relaunched container ({link.info.get('container')})"
        return f"tfdist: {name} restarts with the job's current addresses"

    def job_ended(self, state: JobState, why: str) -> None:
        self._outcome = (state, why)

    def close(self) -> None:
        self.stop(self._names, 0)
        self._closing = True
        told = self._jobapp.finish(*self._outcome, job=self.job.name) if self._jobapp else True
        if self._rm is not None:
            for app_id in self._apps.values():
                self._containers.update(on_yarn.containers_of(self._rm, app_id))
        if self._channel is not None:
            self._channel.close()  # the agents end their tasks and exit 0: the applications finish
        if self._rm is None:
            return
        sure = self._rm.end(list(self._apps.values()), grace=20) and told
        if self._reaper is not None:  # this run's own cleanup is done: the reaper exits,
            self._reaper.close(reap=not sure)  # or finishes it when the RM did not answer
        with contextlib.suppress(RuntimeError):
            rest.save_logs(self._containers, self.run_dir / "yarn-logs",
                           ("stdout", "stderr", "AppMaster.stderr"))
        if self._staging is not None:
            import shutil

            shutil.rmtree(self._staging, ignore_errors=True)


def _rm_address(rm: rest.ResourceManager) -> tuple[str, int]:
    """The RM's (host, port), to find this machine's address the cluster reaches it by."""
    from urllib.parse import urlparse

    url = urlparse(rm.urls[0])
    return (url.hostname or "127.0.0.1", url.port or 8088)

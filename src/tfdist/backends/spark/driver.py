"""Tasks as processes run by agents inside one Spark barrier stage.

One barrier stage with one Spark task per tfdist task, so the job starts all at once or not
at all. Each Spark task runs an agent (:mod:`tfdist.node.agent`, stdlib only,
shipped by value) that connects back to a small authenticated server in this process
(:mod:`tfdist.backends.agent.channel`), holds a port on its executor's host and reports
``host:port``; the supervisor builds TF_CONFIG from those exactly as for local tasks. The
agent runs its task's command as a process group and streams output and the exit back the
moment they happen; it restarts the process when the supervisor says so, so a failed task
never fails the stage. Only an agent that is lost (its executor or its whole host died,
Spark killed the task) ends a task from outside; that fails the stage (Spark does not re-run
a barrier result stage), so tfdist runs a new one once the cluster has the slots for it, and
a restart waits for the new agents. They may be on other hosts (the lost one is gone), so
every task started on a new stage gets a TF_CONFIG built from that stage's addresses: the old
stage's tasks were all lost with it, so no task keeps the old map.

Failing fast: Spark retries a barrier stage bigger than the cluster for many minutes, so
:meth:`SparkBackend.check` compares the gang with the cluster's size before a JVM starts
(local modes from the URL, a standalone master from its JSON status page) and
:meth:`SparkBackend.reserve` waits only ``spark.placement_timeout_seconds`` for the slots.

pyspark is imported here only; the registry imports this module when ``--backend spark``
is asked.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pyspark import cloudpickle  # type: ignore[attr-defined]

from tfdist.backends.agent import ship, workdir
from tfdist.backends.agent.backend import AGENT_WAIT, AgentBackend, AgentRunner
from tfdist.backends.agent.channel import AgentLink, Channel
from tfdist.backends.base import BackendOptions, Output
from tfdist.backends.spark import jvm, probe, stage
from tfdist.backends.spark import plan as spark_plan
from tfdist.backends.yarn import plan as yarn_plan
from tfdist.backends.yarn.spark import SparkOnYarn
from tfdist.cluster import Task, TaskId
from tfdist.errors import BackendError, SpecError
from tfdist.jobspec.model import JobSpec

# Ship the agent's code by value: the executors need pyspark, not tfdist.
for _shipped in (*ship.by_value(), stage):  # the node package whole, and the stage's function
    cloudpickle.register_pickle_by_value(_shipped)

_STAGE_RUNS = 3  # barrier stages one job may run (a new one after an executor is lost)
_NODE_POLL = 3.0  # on YARN: seconds between looks at the RM's NodeManagers while the job runs
SESSION_STARTS = 2  # session starts one job may make when Spark's UI races YARN's AM (jvm.ui_race)


class SparkBackend(AgentBackend):
    """Run every task under an agent in one Spark barrier stage."""

    name = "spark"

    def __init__(self, job: JobSpec, options: BackendOptions | None = None) -> None:
        super().__init__(job, options)
        given = self.options.spark_master or job.spark.master or os.environ.get("SPARK_MASTER")
        self._field = "--spark-master" if self.options.spark_master else "spark.master"
        self.master = given or f"local[{len(self._tasks)}]"
        self._cpus = spark_plan.task_cpus([job.role(t.role).resources.cpus for t in self._tasks])
        self._group = f"tfdist-{self.token}"
        self._stage_run = 0  # the barrier stage that runs (its job group: _group-N)
        self._doomed: dict[int, str] = {}  # why tfdist ended a stage, by run
        self._session: Any = None
        self._starting = False  # a session start under way (or cut short by an interrupt)
        self._own_jvm = False
        self._stage: threading.Thread | None = None
        self._stage_error: str | None = None
        self._moving = threading.Lock()  # a new stage's addresses taken and recorded as one step
        self._tmp: Path | None = None
        self._app_id = ""
        #: With ``yarn``: the cluster's RM, the staged jar archive, the containers seen.
        self._yarn: SparkOnYarn | None = None
        #: On YARN: (task, node) losses already announced; why the gang no longer fits (if so).
        self._announced: set[tuple[str, str]] = set()
        self._unfit: str | None = None

    # -- checking: before a JVM starts -------------------------------------------------

    def _asked(self) -> str:
        return (f"{len(self._tasks)} tasks of {self._cpus} cpu each (spark.task.cpus), "
                "as one barrier stage (all at once)")

    def check(self) -> None:
        kind = spark_plan.master_kind(self.master)
        if self.job.python.wanted:  # refused rather than run without them
            raise SpecError("python: on Spark the executors' Python provides the packages; pack an "
                            "environment and name it in spark.conf (spark.archives and "
                            "spark.pyspark.python), or drop python.requirements/requirements_file")
        for role in {t.role for t in self._tasks}:
            if self.job.role(role).resources.gpus:
                raise SpecError(f"roles.{role}.resources.gpus: the spark backend does not schedule "
                                "GPUs yet; run GPU jobs with --backend local, kubernetes or ray")
        java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else None
        if not (java and java.exists()) and not shutil.which("java"):
            raise SpecError("--backend spark: Spark needs Java 17 or newer and none was found; install "
                            "a JDK (e.g. openjdk-17-jre-headless) or set JAVA_HOME")
        if self.job.spark.ship_workdir and not Path(self.job.workdir).is_dir():
            raise SpecError(f"workdir: {self.job.workdir} does not exist or is not a directory")
        if self.job.spark.ship_workdir:
            workdir.refuse_too_big(Path(self.job.workdir), self.options.runs_root, "spark.ship_workdir")
        # on YARN: HADOOP_CONF_DIR and its RM checked here (before a JVM starts)
        self._yarn = SparkOnYarn(self.job.spark.conf, self.job.name, self.token) if kind == "yarn" else None
        if kind in ("standalone", "k8s"):
            why = probe.unreachable(self.master)
            if why:
                raise SpecError(f"{self._field} {self.master}: no Spark master answers there ({why}); "
                                "start one or give the address of a running master")
        slots = spark_plan.known_slots(self.master, self._cpus)
        has = f"{slots} task slot(s)"
        if kind == "standalone":
            ui = self.job.spark.master_ui or spark_plan.default_ui(self.master)
            status, why = probe.fetch_status(ui)
            if status is not None:
                try:
                    slots, _free, desc = spark_plan.standalone_slots(status, self._cpus)
                    has = f"{slots} task slot(s) in all ({desc})"
                except (AttributeError, TypeError, ValueError):  # a page that is not a master's
                    status, why = None, f"{ui.rstrip('/')}/json/: not a Spark master's status page"
            if status is None:
                note = spark_plan.unchecked_capacity(ui, why, self.job.spark.placement_timeout_seconds)
                print(f"tfdist: warning: {note}", file=sys.stderr, flush=True)
        if slots is not None and slots < len(self._tasks):
            raise SpecError(
                f"the Spark cluster at {self.master} cannot fit the job: it asks for {self._asked()}; "
                f"the cluster has {has}. Ask for fewer tasks or cpus, or a bigger cluster"
            )

    # -- reserving: session, slots, stage, agents -----------------------------------------

    def _conf(self) -> dict[str, str]:
        conf = {
            "spark.task.cpus": str(self._cpus),
            "spark.log.level": "ERROR",
            "spark.ui.showConsoleProgress": "false",
            # Spark's own check of a barrier stage's slots: fail after our timeout, not 10 min
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures":
                str(int(self.job.spark.placement_timeout_seconds) + 1),
        }
        if not os.environ.get("PYSPARK_PYTHON"):
            conf["spark.pyspark.python"] = sys.executable  # executors on this host use ours
        if self._yarn is not None:
            conf.update(self._yarn.conf(len(self._tasks), self._cpus))
        conf.update(self.job.spark.conf)
        return conf

    def _start_session(self) -> Any:
        from pyspark.sql import SparkSession

        if self._yarn is not None:
            self._yarn.stage(self.run_dir)  # the reaper; Spark's jars for YARN, once per Spark installation
        builder = SparkSession.builder.master(self.master).appName(f"tfdist-{self.job.name}")
        for key, value in self._conf().items():
            builder = builder.config(key, value)
        from pyspark import SparkContext

        #: This run starts the JVM (not a caller's own session): close() ends it.
        self._own_jvm = SparkContext._gateway is None  # type: ignore[attr-defined]
        self._starting = True  # a start cut short: close() kills the JVM
        for attempt in range(1, SESSION_STARTS + 1):
            try:
                with jvm.output_to(self.run_dir / "spark-driver.log"), jvm.marked(self.token):
                    session = builder.getOrCreate()
                break
            except Exception as err:  # noqa: BLE001 - py4j and JVM errors have no common base
                why = jvm.first_line(err)
                if not (self._own_jvm and jvm.ui_race(err) and attempt < SESSION_STARTS):
                    raise BackendError(f"spark ({self.master}): the session did not start: {why}") from None
                self._note(f"the Spark session did not start ({why}: Spark's driver UI raced the "
                           f"YARN application master); starting it again ({attempt + 1} of {SESSION_STARTS})")
                self._end_failed_start()
        self._session, self._starting = session, False
        return session.sparkContext

    def _end_failed_start(self) -> None:
        """What a session that failed to start leaves: its JVM, and on YARN its application."""
        jvm.end_driver(self.token, started=False)
        if self._yarn is not None:
            for problem in self._yarn.kill_tagged():
                self._note(problem)

    def _note(self, line: str) -> None:
        """A ``tfdist:`` line in the first task's log (the supervisor shows it)."""
        first = self._names[0]
        self.events.put(Output(first, self._runners[first].attempt, time.time(), f"tfdist: {line}"))

    def _wait_slots(self, sc: Any, after: str | None = None) -> None:
        """Wait until this application's executors give the stage enough slots (``after``:
        why a new stage is needed, when executors were lost)."""
        timeout = self.job.spark.placement_timeout_seconds
        deadline = time.monotonic() + timeout
        jsc = sc._jsc.sc()
        slots = 0
        while True:
            if self._unfit:  # YARN's nodes left cannot hold the gang: no use waiting
                raise BackendError(self._unfit)
            try:
                slots = int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
            except Exception:  # noqa: BLE001 - an internal Spark API: leave the check to Spark
                return
            if slots >= len(self._tasks) or self.master.startswith("local"):
                return
            if time.monotonic() > deadline and after:
                raise BackendError(
                    f"the job no longer fits the Spark cluster at {self.master}: it asks for "
                    f"{self._asked()}, and {slots} task slot(s) were left to it for {timeout:g}s "
                    f"after {after} (spark.placement_timeout_seconds sets the wait)"
                )
            if time.monotonic() > deadline:
                raise BackendError(
                    f"the Spark cluster at {self.master} gave this job {slots} task slot(s) within "
                    f"{timeout:g}s; it asks for {self._asked()}; "
                    + (f"its executors give {slots} (spark.executor.instances "
                       f"{sc.getConf().get('spark.executor.instances', '2')} x spark.executor.cores / "
                       "spark.task.cpus; the YARN queue may also hold fewer containers than asked)"
                       if self._yarn is not None else
                       "other applications may hold the rest, try again later")
                    + " (spark.placement_timeout_seconds sets the wait)"
                )
            time.sleep(0.5)

    def _driver_host(self, sc: Any) -> str:
        if self.master.startswith("local"):
            return "127.0.0.1"
        host = sc.getConf().get("spark.driver.host") or socket.gethostname()
        return socket.gethostbyname(host)

    def _ship(self, sc: Any) -> str | None:
        if not self.job.spark.ship_workdir:
            return None
        self._tmp = Path(tempfile.mkdtemp(prefix="tfdist-spark-"))
        archive = self._tmp / f"{workdir.ARCHIVE_ALIAS}.tar.gz"
        workdir.pack_workdir(Path(self.job.workdir), archive, [self.options.runs_root])
        sc.addArchive(f"{archive}#{workdir.ARCHIVE_ALIAS}")
        return workdir.ARCHIVE_ALIAS

    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        sc = self._start_session()
        self._wait_slots(sc)
        alias = self._ship(sc)
        try:
            self._channel = Channel(self._driver_host(sc), self._secret, self._names, self._on_message)
        except OSError as err:
            raise BackendError(f"spark: cannot listen for the task agents on the driver's address "
                               f"(spark.driver.host): {err}; set spark.driver.host in spark.conf") from None
        cwd = str(Path(self.job.workdir).resolve())
        python = self._conf().get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
        shipped = [{"name": t.name, "command": self.job.command_for(t.role), "cwd": cwd, "python": python,
                    "leave": self._leave_of(t.role, "source"), **self._spare_of(t.role)} for t in self._tasks]
        main = stage.barrier_main(self._channel.address, self._secret, self.token, shipped, alias)
        self._stage = threading.Thread(target=self._run_stage, args=(sc, main), name="spark-stage",
                                       daemon=True)
        self._stage.start()
        why = self._channel.wait(self._names, AGENT_WAIT, lambda: self._stage_error)
        if why:
            raise BackendError(f"spark ({self.master}): the task agents did not start: {why}")
        infos = self._take_addresses()
        self._app_id = str(sc.applicationId)
        self._note_containers(infos)
        self._write_placement(self._app_id, infos)
        if self._yarn is not None:
            threading.Thread(target=self._watch_nodes, name="spark-yarn-nodes", daemon=True).start()
        return self._placement.reserved(tasks)

    def _run_stage(self, sc: Any, main: Any) -> None:
        """Run the barrier stage; when it ends while the job runs, start a new one.

        Spark does not re-run a failed barrier result stage (measured: an executor killed
        under a running agent aborts the job with "Could not recover from a failed barrier
        ResultStage"), so tfdist does: the old stage's agents are told to end, every task
        still running is reported lost, and once the cluster has the slots (at most
        ``spark.placement_timeout_seconds``: a lost host may have taken them with it) a new
        stage's agents take their places, wherever Spark puts them. The restart policy
        decides the rest."""
        n = len(self._tasks)
        why = ""
        for run in range(_STAGE_RUNS):
            if run:
                try:
                    self._wait_slots(sc, after=why)  # ends at once when YARN's nodes no longer fit
                except BackendError as err:  # no new stage: every waiting restart ends with this
                    self._stage_error = str(err)
                    return
            try:
                self._stage_run = run
                sc.setJobGroup(f"{self._group}-{run}", f"tfdist job {self.job.name}", interruptOnCancel=True)
                sc.parallelize(range(n), n).barrier().mapPartitions(main).collect()
                why = "the Spark stage ended"
            except Exception as err:  # noqa: BLE001 - py4j and JVM errors have no common base
                why = f"the Spark stage failed: {jvm.first_line(err)}"
            why = self._doomed.get(run, why)
            if self._closing:
                return
            if run + 1 == _STAGE_RUNS or self._channel is None:
                self._stage_error = f"{why} (stage run {run + 1} of {_STAGE_RUNS}; no more)"
                return
            for name in self._names:  # the old stage's agents end; their tasks are lost
                link = self._channel.link(name)
                if link is not None:
                    link.closing = True  # no new attempt goes to it; its end is no news
                    link.send({"op": "shutdown"})
                runner = self._runners[name]
                if runner.link is not None:  # not one already waiting for a new agent
                    self._lost(runner, runner.attempt, f"{why}; tfdist starts a new stage")
                elif not runner.done.is_set():
                    self.events.put(Output(name, runner.attempt, time.time(),
                                           f"tfdist: {why}; tfdist starts a new stage"))
            self._channel.wait_gone(self._names, 30)
            with self._channel.cond:
                self._channel.ports.clear()  # new agents take any port: their hosts may differ

    def _note_containers(self, infos: dict[str, dict[str, Any]]) -> None:
        if self._yarn is not None:
            self._yarn.note(self._app_id, infos)

    def _write_placement(self, app_id: str, infos: dict[str, dict[str, Any]]) -> None:
        keys = ("host", "port", "executor", "executor_address", "hostname", "pid", "stage", "stage_attempt",
            "container", "node", "node_http", "cwd")
        record = {
            "master": self.master,
            "application": app_id,
            "tasks": {n: {k: i.get(k) for k in keys} for n, i in infos.items()},
        }
        with contextlib.suppress(OSError):
            (self.run_dir / "spark_placement.json").write_text(json.dumps(record, indent=2) + "\n")

    # -- running: how agents are lost and replaced (the rest is AgentBackend's) -----------

    def _connection_ended(self, name: str) -> None:
        """Any agent of the running stage that drops (not only one whose attempt runs: a host
        may be lost between attempts) ends the stage for tfdist."""
        link = self._channel.link(name) if self._channel else None
        if not self._closing and link is not None and not link.alive and not link.closing:
            self._agent_dropped(self._runners[name], link)

    def _agent_dropped(self, runner: AgentRunner, dropped: AgentLink) -> None:
        """An agent of the running stage dropped or went silent (its host died or is cut off):
        the stage is over. Its agents take no restart (``closing``: they wait for the next
        stage), and the tasks on that host are lost now, named in one line with the executor
        and host; the rest when the stage ends (see :meth:`_run_stage`), which
        :func:`jvm.end_stage` makes happen now rather than when Spark notices the executor."""
        assert self._channel is not None
        run = self._stage_run  # read before closing: a later run starts only once its links are closing
        if dropped.closing:  # the stage is already ending
            return
        links = {n: lk for n in self._names if (lk := self._channel.link(n)) is not None}
        infos = {n: lk.info for n, lk in links.items()}
        there, reason = spark_plan.lost_on_host(dropped.info, dropped.ended, infos)
        for lk in links.values():
            lk.closing = True
        for name in there:
            other = self._runners[name]
            if other.link is links[name] and not other.done.is_set():
                self._lost(other, other.attempt, reason)
            else:  # between attempts: still said, so the host's loss is never silent
                note = f"tfdist: {name}'s agent lost: {reason}"
                self.events.put(Output(name, other.attempt, time.time(), note))
        self._doomed[run] = f"{dropped.name}'s agent was lost"
        end = (self._session.sparkContext, f"{self._group}-{run}", dropped.info.get("executor"))
        threading.Thread(target=jvm.end_stage, args=end, name="spark-end-stage", daemon=True).start()

    def _watch_nodes(self) -> None:
        """On YARN, while the job runs: the tasks on a NodeManager the RM has given up on
        (LOST after missed heartbeats, SHUTDOWN, ...: :func:`yarn_plan.lost_nodes`, as for
        ``--backend yarn``) are named in one line with the node. The stage needs no ending
        from here: the RM reports the node's containers lost to Spark's ApplicationMaster at
        the same moment, Spark drops their executors (which fails the barrier stage, and
        tfdist runs a new one, see :meth:`_run_stage`) and asks YARN for new executors, which
        land on the nodes left. When the gang (its executors and AM, as YARN allocated them)
        no longer fits the nodes left, those tasks cannot run again and the job fails now,
        saying so, instead of waiting ``spark.placement_timeout_seconds`` for slots."""
        assert self._yarn is not None
        while not self._closing:
            time.sleep(_NODE_POLL)
            if self._channel is None:
                continue
            infos = self._agent_infos()
            lost = {n: w for n, w in self._yarn.lost_tasks(infos).items()
                    if (n, str(infos[n].get("node"))) not in self._announced}
            if lost and not self._closing:
                self._nodes_lost(lost, infos)

    def _nodes_lost(self, lost: dict[str, str], infos: dict[str, dict[str, Any]]) -> None:
        assert self._yarn is not None
        by_node: dict[str, list[str]] = {}
        for name in sorted(lost):
            node = str(infos[name].get("node"))
            self._announced.add((name, node))
            by_node.setdefault(node, []).append(name)
        unfit = self._yarn.unfit(len(self._tasks))
        then = unfit or "Spark gets new executors from YARN on the nodes left and they restart there"
        for node, names in sorted(by_node.items()):
            info = infos[names[0]]
            host = f"host {info.get('hostname')} ({info.get('host')})"
            line = "tfdist: " + yarn_plan.node_lost(node, host, lost[names[0]], names, then)
            self.events.put(Output(names[0], self._runners[names[0]].attempt, time.time(), line))
        if unfit:  # no new stage: a restart waiting for one ends with this, and so does a stage's wait
            self._unfit = self._stage_error = unfit
            for name in sorted(lost):
                self._lost(self._runners[name], self._runners[name].attempt, unfit, final=True)

    def _attempt_env(self, task: Task) -> dict[str, str]:
        env = super()._attempt_env(task)
        env.setdefault("CUDA_VISIBLE_DEVICES", "")  # no GPUs on Spark yet: TF must not grab any
        return env

    def _adopt_stage(self) -> None:
        """Take the addresses of the current stage's agents (every task has one) as the job's."""
        assert self._channel is not None
        with self._moving:
            infos = self._agent_infos()
            self._placement.adopt(infos)
            self._write_placement(self._app_id, infos)
            self._note_containers(infos)

    # A restart after the stage failed (tfdist runs a new one) waits until every task has an
    # agent on the new stage, then starts there with the new stage's cluster map (its host may
    # differ: the one it ran on may be gone).

    def _await_agent(self, name: str) -> str | None:
        assert self._channel is not None
        return self._channel.wait(self._names, AGENT_WAIT, lambda: self._stage_error)

    def _agent_problem(self, name: str, link: AgentLink) -> str | None:
        return f"its new agent: {link.info['error']}" if "error" in link.info else None

    def _move_to(self, name: str, link: AgentLink, message: dict[str, Any]) -> str:
        self._adopt_stage()
        message["env"] = self._placement.retarget(message["env"])
        return (f"tfdist: {name} runs on a new agent (executor {link.info.get('executor')} on "
                f"host {link.info.get('hostname')}, {self._placement.address(name)})")

    def close(self) -> None:
        self.stop(self._names, 0)
        self._closing = True
        if self._channel is not None:
            for name in self._names:
                link = self._channel.link(name)
                if link is not None:
                    link.send({"op": "shutdown"})
        if self._stage is not None:
            self._stage.join(timeout=20)
            if self._stage.is_alive() and self._session is not None:
                with contextlib.suppress(Exception):
                    self._session.sparkContext.cancelJobGroup(f"{self._group}-{self._stage_run}")
                self._stage.join(timeout=20)
        if self._channel is not None:
            self._channel.close()
        self._note_containers({})  # before the stop: the RM lists live containers only
        if self._session is not None:
            with contextlib.suppress(Exception):
                self._session.stop()
            self._session = None
        if self._own_jvm:
            jvm.end_driver(self.token, started=not self._starting)
            self._own_jvm = False
        if self._starting:  # interrupted (or failed) while the session started
            self._starting = False
            if self._yarn is not None:  # it may have submitted its application already
                for problem in self._yarn.kill_tagged():
                    self._note(problem)
        if self._yarn is not None:
            for problem in self._yarn.finish(self._app_id, self.run_dir):
                self._note(problem)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

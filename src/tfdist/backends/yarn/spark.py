"""What the Spark backend does differently when its master is ``yarn``.

- before a JVM starts: ``HADOOP_CONF_DIR`` must name a configuration whose ResourceManager
  answers (else one line, exit 2);
- Spark's own jars are staged once per Spark installation as one archive in
  ``$TFDIST_HOME/spark-yarn/`` and named by ``spark.yarn.archive``, so a session does not
  compress ~460 MB of jars every time (Spark still copies the archive into the application's
  staging directory, and the NodeManagers unpack that copy per application);
- the application carries tags (``tfdist``, ``tfdist-job-NAME``, ``tfdist-run-TOKEN``) so it
  is found by job in YARN's UI and REST API;
- at the end: an application still live is killed through the RM REST API, and every
  container's stdout and stderr is copied from its NodeManager into the run directory;
- a reaper (:mod:`tfdist.backends.yarn.reaper`) started before the session kills the run's
  applications by tag if tfdist's process ends without that end (SIGKILLed: the driver JVM
  dies with it, and an application still ACCEPTED would wait on in the queue).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from tfdist.backends.yarn import plan, reaper, rest
from tfdist.backends.yarn.plan import RoleAsk
from tfdist.errors import BackendError, SpecError
from tfdist.home import home as tfdist_home

#: Spark settings that already say where Spark's jars are: tfdist stages nothing then.
JAR_SETTINGS = ("spark.yarn.archive", "spark.yarn.jars")


def check(environ: dict[str, str] | None = None) -> rest.ResourceManager:
    """The cluster's RM client; SpecError (exit 2) when it is not configured or not answering."""
    rm = rest.ResourceManager.from_environ(environ, timeout=5.0)
    try:
        rm.info()
    except rest.RMError as err:
        raise SpecError(f"spark.master yarn: the ResourceManager of HADOOP_CONF_DIR does not answer ({err}); "
                        "start it or point HADOOP_CONF_DIR at a running cluster's configuration") from None
    return rm


def tags(job_name: str, token: str) -> list[str]:
    """The application tags of one run (YARN lowercases them and caps each at 100 characters)."""
    return ["tfdist", f"tfdist-job-{job_name}"[:100], run_tag(token)]


def run_tag(token: str) -> str:
    """The tag only this run's applications carry (a job name is at most 63 characters, so
    the token's random part is never cut off)."""
    return f"tfdist-run-{token}"[:100]


def archive_key(jars: list[Path]) -> str:
    """A name for an archive of these jars: changes when any jar's name, size or mtime does."""
    digest = hashlib.sha256()
    for jar in sorted(jars):
        st = jar.stat()
        digest.update(f"{jar.name}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
    return digest.hexdigest()[:16]


def staged_archive(spark_home: Path, cache: Path) -> Path:
    """The archive of ``spark_home/jars`` under ``cache``, made once (stored, not compressed:
    jars are compressed already). Made under a temporary name and renamed, so a concurrent
    job never sees half an archive."""
    jars = sorted((spark_home / "jars").glob("*.jar"))
    if not jars:
        raise SpecError(f"spark.master yarn: no jars under {spark_home / 'jars'}; "
                        "is pyspark installed whole?")
    target = cache / archive_key(jars) / "spark-libs.zip"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".spark-libs-", suffix=".zip", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as zf:
            for jar in jars:
                zf.write(jar, jar.name)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return target


def session_conf(
    user_conf: dict[str, str], job_name: str, token: str, archive: Path | None,
    *, tasks: int = 0, task_cpus: int = 1,
) -> dict[str, str]:
    """Spark settings tfdist adds for YARN (the job's own ``spark.conf`` wins over them).

    ``spark.executor.instances``: Spark on YARN starts 2 executors unless told, so a barrier
    stage of 3 tasks (the README's chief and two workers) never got its slots and the job
    failed after the placement wait. Unless the job sets it or turns dynamic allocation on,
    tfdist asks for as many executors as the ``tasks`` need at ``task_cpus`` each, with the
    job's ``spark.executor.cores`` (1 on YARN by default)."""
    conf = {"spark.yarn.tags": ",".join(tags(job_name, token))}
    if archive is not None and not any(k in user_conf for k in JAR_SETTINGS):
        conf["spark.yarn.archive"] = f"file://{archive}"
    dynamic = str(user_conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true"
    if tasks and not dynamic and "spark.executor.instances" not in user_conf:
        try:
            cores = max(1, int(user_conf.get("spark.executor.cores", 1)))
        except ValueError:
            cores = 1  # Spark itself refuses the value, by name
        per_executor = max(1, cores // max(1, task_cpus))
        conf["spark.executor.instances"] = str(-(-tasks // per_executor))
    return conf


def containers_of(rm: rest.ResourceManager, app_id: str) -> dict[str, str]:
    """``{container_id: node_http}`` of an application's live containers (empty when the RM
    does not say)."""
    with contextlib.suppress(rest.RMError):
        return {str(c["containerId"]): str(c["nodeHttpAddress"]) for c in rm.containers(app_id)
                if c.get("containerId") and c.get("nodeHttpAddress")}
    return {}


def gang_of(containers: list[dict[str, Any]], executors: set[str]) -> tuple[list[RoleAsk], list[RoleAsk]]:
    """The job's gang on YARN as the RM allocated it, from an application's containers
    (:meth:`rest.ResourceManager.containers`): the executors the tasks run in (``executors``,
    their container ids) and the ApplicationMaster, each grouped by shape; empty when the RM
    did not list them all."""
    am_ids = {str(c["containerId"]) for c in containers if c.get("amContainer")}
    shapes = {str(c["containerId"]): (int(c["allocatedMB"]), int(c["allocatedVCores"])) for c in containers
              if c.get("containerId") and str(c.get("allocatedMB", "")).isdigit()
              and str(c.get("allocatedVCores", "")).isdigit()}
    ams = [cid for cid in am_ids if cid in shapes]
    if not executors or not executors <= set(shapes) or not ams:
        return [], []

    def grouped(role: str, ids: list[str]) -> list[RoleAsk]:
        counts: dict[tuple[int, int], int] = {}
        for cid in ids:
            counts[shapes[cid]] = counts.get(shapes[cid], 0) + 1
        return [RoleAsk(role, n, mb, vcores, 0) for (mb, vcores), n in sorted(counts.items())]

    return grouped("executor", sorted(executors)), grouped("Spark's ApplicationMaster", [max(ams)])


def lost_tasks(rm: rest.ResourceManager, infos: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The tasks (``infos``: what each one's agent reported, its ``node`` among it) whose
    NodeManager the RM has given up on, and why (``{}`` when the RM does not answer)."""
    placed = {n: str(i.get("node") or "") for n, i in infos.items()}
    try:
        return plan.lost_nodes(placed, rm.nodes())
    except rest.RMError:
        return {}


def finish(rm: rest.ResourceManager, app_id: str, containers: dict[str, str], run_dir: Path) -> list[str]:
    """After the session stopped: kill the application if it is still live, copy the
    containers' logs into ``run_dir/yarn-logs``. Returns what went wrong (lines for the log)."""
    problems = []
    try:
        state = str(rm.app(app_id).get("state", ""))
        if state in rest.LIVE_STATES:
            rm.kill(app_id)
    except rest.RMError as err:
        problems.append(f"cannot check or kill {app_id}: {err}")
    rest.save_logs(containers, run_dir / "yarn-logs")
    return problems


def node_of(info: dict[str, Any]) -> tuple[str, str] | None:
    """``(container_id, node_http)`` from what a Spark agent reported, when on YARN."""
    cid, node = info.get("container"), info.get("node_http")
    return (str(cid), str(node)) if cid and node else None


class SparkOnYarn:
    """One Spark job's YARN side: the RM it checked, the archive it staged, the containers
    it saw (the Spark driver calls these at its check, session start, placement and close)."""

    def __init__(self, user_conf: dict[str, str], job_name: str, token: str) -> None:
        self.user_conf = user_conf
        self.job_name, self.token = job_name, token
        self.rm = check()
        self.archive: Path | None = None
        self.containers: dict[str, str] = {}
        #: The containers the gang holds at once (executors, AM), as YARN allocated them.
        self.gang: tuple[list[RoleAsk], list[RoleAsk]] = ([], [])
        self.reaper: reaper.Reaper | None = None

    def stage(self, run_dir: Path) -> None:
        """Before the session starts (it submits the application): start the run's reaper
        (what it does goes to ``run_dir/yarn-reaper.log``), and stage pyspark's jars under
        ``$TFDIST_HOME/spark-yarn`` unless the job names its own."""
        if self.reaper is None:
            try:
                self.reaper = reaper.Reaper(run_tag(self.token), self.rm.urls, self.rm.user,
                                            run_dir / "yarn-reaper.log")
            except OSError as err:
                raise BackendError(f"spark: cannot start the reaper of this run's YARN application: "
                                   f"{err}") from None
        if any(k in self.user_conf for k in JAR_SETTINGS):
            return
        import pyspark

        cache = tfdist_home() / "spark-yarn"
        try:
            self.archive = staged_archive(Path(pyspark.__file__).resolve().parent, cache)
        except OSError as err:
            raise BackendError(f"spark: cannot stage Spark's jars for YARN under {cache}: {err}; set "
                               "TFDIST_HOME to a writable directory, or spark.yarn.archive") from None

    def conf(self, tasks: int = 0, task_cpus: int = 1) -> dict[str, str]:
        return session_conf(self.user_conf, self.job_name, self.token, self.archive,
                            tasks=tasks, task_cpus=task_cpus)

    def note(self, app_id: str, infos: dict[str, dict[str, Any]]) -> None:
        """Remember the containers the agents ran in, and the application's live ones (the RM
        lists only those; their logs are fetched at the end)."""
        for info in infos.values():
            found = node_of(info)
            if found:
                self.containers[found[0]] = found[1]
        if not app_id:
            return
        with contextlib.suppress(rest.RMError):
            listed = self.rm.containers(app_id)
            self.containers.update({str(c["containerId"]): str(c["nodeHttpAddress"]) for c in listed
                                    if c.get("containerId") and c.get("nodeHttpAddress")})
            executors = {str(i["container"]) for i in infos.values() if i.get("container")}
            gang = gang_of(listed, executors)
            if gang[0]:
                self.gang = gang

    def lost_tasks(self, infos: dict[str, dict[str, Any]]) -> dict[str, str]:
        return lost_tasks(self.rm, infos)

    def unfit(self, tasks: int) -> str | None:
        """Why the gang (as YARN allocated it) no longer fits the NodeManagers left (None: it
        may, or the RM did not say)."""
        executors, ams = self.gang
        if not executors:
            return None
        try:
            return plan.no_longer_fits(executors, self.rm.nodes(), ams=ams, tasks=tasks)
        except rest.RMError:
            return None

    def kill_tagged(self) -> list[str]:
        """Kill, through the RM, every live application of this run (found by its
        ``tfdist-run-TOKEN`` tag: a session cut short never said its application's id).
        Returns what went wrong (lines for the log)."""
        problems = []
        try:
            live = self.rm.apps(tag=run_tag(self.token))
        except rest.RMError as err:
            return [f"cannot list this run's applications: {err}"]
        for app_id in reaper.doomed(live, run_tag(self.token)):
            try:
                self.rm.kill(app_id)
            except rest.RMError as err:
                problems.append(f"cannot kill {app_id}: {err}")
        return problems

    def finish(self, app_id: str, run_dir: Path) -> list[str]:
        """The session's end: its application killed if still live, its logs copied; then
        the reaper is told this run ended as it should (or, when the RM could not be asked,
        left to finish the kill)."""
        problems = finish(self.rm, app_id, self.containers, run_dir) if app_id else []
        if self.reaper is not None:
            self.reaper.close(reap=bool(problems))
            self.reaper = None
        return problems

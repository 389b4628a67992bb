"""Pure decisions of the yarn backend: what each role asks YARN for, whether it can ever fit,
and the REST submission of each role's application.

One YARN application per role, each run by Hadoop's distributed shell ApplicationMaster (the
``hadoop-yarn-applications-distributedshell`` jar every Hadoop installation carries under
``share/hadoop/yarn``): it asks for the role's containers with the role's own resources,
launches tfdist's agent in each, heartbeats the RM, and relaunches a container in place
(same node) when it exits, as ``--container_retry_policy`` says. No I/O here.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from tfdist.errors import SpecError
from tfdist.jobspec.model import memory_bytes
from tfdist.states import describe_memory_kill

#: What a task gets when its role names no memory (MB), and the ApplicationMaster's container.
DEFAULT_MEMORY_MB = 1024
AM_MEMORY_MB = 256
#: The job's own application (backends/yarn/jobapp.py): an unmanaged AM, no container, yet
#: the RM counts it in the queue's AM share (measured: 128 MB, 1 vcore there, nothing in the
#: queue's used resources). The RM rounds it up to its minimum allocation.
JOB_AM_MEMORY_MB = 128
AM_CLASS = "org.apache.hadoop.yarn.applications.distributedshell.ApplicationMaster"


@dataclass(frozen=True)
class RoleAsk:
    """What one role's application asks YARN for: ``count`` containers of one shape."""

    role: str
    count: int
    memory_mb: int
    vcores: int
    gpus: int

    def describe(self) -> str:
        gpus = f", {self.gpus} GPU" if self.gpus else ""
        return f"{self.count} x ({self.memory_mb} MB, {self.vcores} vcores{gpus}) for {self.role}"


def memory_mb(quantity: str | None, where: str) -> int:
    """A memory quantity (``4Gi``, ``512Mi``, ``1G``, bytes; the job spec's one rule, see
    :func:`tfdist.jobspec.model.memory_bytes`) in MB, rounded up."""
    if quantity is None:
        return DEFAULT_MEMORY_MB
    try:
        size = memory_bytes(str(quantity))
    except ValueError as err:
        raise SpecError(f"{where}: {str(quantity)[:40]!r}: {err}") from None
    return -(-size // (1024 * 1024))


def role_asks(roles: list[tuple[str, int, float | None, int, str | None]]) -> list[RoleAsk]:
    """``(role, replicas, cpus, gpus, memory)`` per role -> what each role's application asks."""
    out = []
    for role, count, cpus, gpus, memory in roles:
        if count <= 0:
            continue
        vcores = max(1, -(-int(cpus * 1000) // 1000)) if cpus else 1
        out.append(RoleAsk(role, count, memory_mb(memory, f"roles.{role}.resources.memory"), vcores, gpus))
    return out


@dataclass(frozen=True)
class QueueLimits:
    """What a queue can ever give (from the RM's scheduler REST API)."""

    queue: str
    max_memory_mb: int | None  # one container
    max_vcores: int | None
    capacity_memory_mb: int | None  # the whole queue at its maximum capacity
    capacity_vcores: int | None
    #: What its ApplicationMasters may hold at once at most (maximum-am-resource-percent of
    #: its maximum capacity; memory only: the default resource calculator checks no more).
    am_memory_mb: int | None = None


def knows_limits(scheduler: dict[str, Any]) -> bool:
    """Whether tfdist reads this scheduler's queues (the CapacityScheduler's; the Fair and FIFO
    schedulers answer in other shapes, and their jobs go unchecked)."""
    info = (scheduler.get("scheduler") or {}).get("schedulerInfo") or {}
    return info.get("type") == "capacityScheduler"


def queue_limits(scheduler: dict[str, Any], queue: str, cluster_max: dict[str, Any]) -> QueueLimits | None:
    """The limits of leaf ``queue`` (``default`` or ``root.a.b``) in a CapacityScheduler's
    ``/ws/v1/cluster/scheduler`` answer; None when the queue is not there."""
    info = (scheduler.get("scheduler") or {}).get("schedulerInfo") or {}
    want = queue if queue.startswith("root.") else None

    def walk(node: dict[str, Any]) -> dict[str, Any] | None:
        for q in ((node.get("queues") or {}).get("queue") or []):
            path = q.get("queuePath") or q.get("queueName")
            named = (want and path == want) or (not want and q.get("queueName") == queue)
            if named and not q.get("queues"):
                return dict(q)
            found = walk(q)
            if found:
                return found
        return None

    leaf = walk(info)
    if leaf is None:
        return None
    alloc = leaf.get("maximumAllocation") or {}
    cap = leaf.get("maxEffectiveCapacity") or {}
    memory, vcores = _int(cap.get("memory")), _int(cap.get("vCores"))
    # one user gets at most user-limit-factor x the queue's capacity (when the RM says)
    factor, least = leaf.get("userLimitFactor"), leaf.get("minEffectiveCapacity") or {}
    if isinstance(factor, (int, float)) and factor > 0:
        for key, current in (("memory", memory), ("vCores", vcores)):
            floor = _int(least.get(key))
            if floor and current:
                limited = min(current, int(floor * factor))
                memory, vcores = (limited, vcores) if key == "memory" else (memory, limited)
    share = leaf.get("configuredMaxAMResourceLimit")  # a fraction (0.1: Hadoop's default)
    am_memory = int(memory * share) if memory and isinstance(share, (int, float)) and share > 0 else None
    return QueueLimits(
        queue=str(leaf.get("queuePath") or leaf.get("queueName")),
        am_memory_mb=am_memory,
        max_memory_mb=_int(alloc.get("memory")) or _int(cluster_max.get("memory")),
        max_vcores=_int(alloc.get("vCores")) or _int(cluster_max.get("vCores")),
        capacity_memory_mb=memory,
        capacity_vcores=vcores,
    )


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and int(value) > 0 else None
    except (TypeError, ValueError):
        return None


def fit_problem(asks: list[RoleAsk], limits: QueueLimits) -> str | None:
    """Why the job can never run in this queue (None when it can): a container larger than
    the largest the queue allocates, more in all than the queue's maximum capacity (every
    task runs at once, plus one ApplicationMaster per role), or more ApplicationMasters than
    the queue's AM share can ever hold (one per role, and the job's own: it holds no
    container, so the queue's capacity does not count it, but its AM share does)."""
    for a in asks:
        if limits.max_memory_mb and a.memory_mb > limits.max_memory_mb:
            return (f"{a.role} asks for {a.memory_mb} MB a container; queue {limits.queue} allocates at "
                    f"most {limits.max_memory_mb} MB (roles.{a.role}.resources.memory)")
        if limits.max_vcores and a.vcores > limits.max_vcores:
            return (f"{a.role} asks for {a.vcores} vcores a container; queue {limits.queue} allocates at "
                    f"most {limits.max_vcores} (roles.{a.role}.resources.cpus)")
    memory = sum(a.count * a.memory_mb + AM_MEMORY_MB for a in asks)
    vcores = sum(a.count * a.vcores + 1 for a in asks)
    if limits.capacity_memory_mb and memory > limits.capacity_memory_mb:
        return (f"the job needs {memory} MB at once ({'; '.join(a.describe() for a in asks)}, and "
                f"{AM_MEMORY_MB} MB per role for its ApplicationMaster); queue {limits.queue} holds at "
                f"most {limits.capacity_memory_mb} MB")
    if limits.capacity_vcores and vcores > limits.capacity_vcores:
        return (f"the job needs {vcores} vcores at once ({'; '.join(a.describe() for a in asks)}, and "
                f"one per role for its ApplicationMaster); queue {limits.queue} holds at most "
                f"{limits.capacity_vcores}")
    am_memory = len(asks) * AM_MEMORY_MB + JOB_AM_MEMORY_MB
    if limits.am_memory_mb and am_memory > limits.am_memory_mb:
        return (f"its {len(asks) + 1} ApplicationMasters need {am_memory} MB at once ({AM_MEMORY_MB} MB "
                f"per role, {JOB_AM_MEMORY_MB} MB for the job's own application); queue {limits.queue} "
                f"lets ApplicationMasters hold at most {limits.am_memory_mb} MB "
                "(maximum-am-resource-percent)")
    return None


def b64(data: bytes) -> str:
    """Environment values travel through the NodeManager's launch script as ``export K="V"``:
    base64 keeps them free of quotes, dollars and newlines."""
    return base64.b64encode(data).decode()


#: The distributed shell runs this in every container (it appends its own log redirections,
#: so they apply to the agent). Quote-free on purpose: the NodeManager wraps it in
#: ``bash -c "..."`` and writes the environment as ``export K="V"``, so everything that
#: travels is a plain word or base64.
CONTAINER_COMMAND = "printenv TFDIST_BOOT | base64 -d > tfdist_boot.py && exec $TFDIST_PYTHON tfdist_boot.py"

#: The bootstrap (``TFDIST_BOOT``): unpack the shipped agent and run it in a child. The
#: parent stays as the container's process to turn an agent killed by a signal into exit 75
#: (EX_TEMPFAIL): a NodeManager never relaunches a container whose exit code is 137 or 143
#: (it takes those for a kill it asked for), so an agent SIGKILLed by the OOM killer or by
#: hand would otherwise end its task for good instead of being relaunched in place. A
#: signal to the whole container (the NodeManager stopping it) ends the parent as before.
BOOT = (
    "import base64, os, sys\n"
    "with open('tfdist-agent.zip', 'wb') as f:\n"
    "    f.write(base64.b64decode(os.environ['TFDIST_AGENT']))\n"
    "sys.path.insert(0, os.path.abspath('tfdist-agent.zip'))\n"
    "from tfdist.node import yarn_container as agent\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    try:\n"
    "        code = agent.main(os.environ)\n"
    "    except BaseException:\n"
    "        import traceback; traceback.print_exc(); code = 1\n"
    "    sys.stdout.flush(); sys.stderr.flush(); os._exit(code)\n"
    "status = os.waitpid(pid, 0)[1]\n"
    "sys.exit(75 if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status))\n"
)
_WORD = re.compile(r"^[\w./:=+,@%-]+$")


def shell_commands(command: str) -> str:
    """The distributed shell AM reads its container command from the file ``shellCommands``
    in Java's ``writeUTF`` form (a two-byte length, then the bytes): that file, base64."""
    data = command.encode()
    return b64(len(data).to_bytes(2, "big") + data)


#: A JVM that only coordinates: the client compiler only, the serial collector. C2's
#: compiler threads and a parallel collector would take CPU from the tasks beside it
#: (docs/yarn.md has the figure). The test suite gives its Spark JVMs the same.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The AM's JVM: it asks for containers and watches them, nothing more; a small heap.
AM_JVM = f"-Xmx192m {QUICK_JVM}"


def am_command(ask: RoleAsk, container_env: dict[str, str], max_retries: int) -> str:
    """The distributed shell ApplicationMaster's launch command for one role: write
    ``shellCommands`` from ``TFDIST_CMD``, then start the AM."""
    args = ["--container_memory", str(ask.memory_mb), "--container_vcores", str(ask.vcores),
            "--num_containers", str(ask.count), "--priority", "0",
            "--container_retry_policy", "1",  # ContainerRetryPolicy.RETRY_ON_ALL_ERRORS
            "--container_max_retries", str(max_retries), "--container_retry_interval", "1000"]
    if ask.gpus:
        args += ["--container_resources", f"yarn.io/gpu={ask.gpus}"]
    for key, value in sorted(container_env.items()):
        args += ["--shell_env", f"{key}={value}"]
    bad = [a for a in args if not _WORD.match(a)]
    if bad:
        raise SpecError(f"yarn: cannot pass {bad[0][:60]!r} to the ApplicationMaster (plain words only)")
    return ("printenv TFDIST_CMD | base64 -d > shellCommands && "
            f"exec {{{{JAVA_HOME}}}}/bin/java {AM_JVM} {AM_CLASS} " + " ".join(args)
            + " 1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr")


def app_header(app_id: str, name: str, queue: str, tags: list[str]) -> dict[str, Any]:
    """What every application tfdist submits says of itself in the RM REST body (the roles'
    and the job's own): its id, name, type, queue and tags (by which tfdist and its reaper
    find a run's applications)."""
    return {"application-id": app_id, "application-name": name, "application-type": "tfdist",
            "queue": queue, "application-tags": {"tag": tags}}


def submission(
    app_id: str, name: str, queue: str, tags: list[str], ask: RoleAsk,
    container_env: dict[str, str], classpath: str, secret: str, max_retries: int,
) -> dict[str, Any]:
    """The RM REST body (``POST /ws/v1/cluster/apps``) of one role's application. The job's
    secret travels as a YARN credential (the container token file, readable by the job's
    user only), never in the environment or on a command line the NodeManager logs."""
    return {
        **app_header(app_id, name, queue, tags),
        # 2, not 1: the RM gives an application of one attempt no new one for any reason, so an
        # ApplicationMaster lost with its node would end its role; with 2 a new attempt asks for
        # the role's containers on the nodes left (an AM lost with its node is not counted)
        "max-app-attempts": 2,
        "unmanaged-AM": False,
        "resource": {"memory": AM_MEMORY_MB, "vCores": 1},
        "am-container-spec": {
            "commands": {"command": am_command(ask, container_env, max_retries)},
            "environment": {"entry": [
                {"key": "CLASSPATH", "value": classpath},
                {"key": "TFDIST_CMD", "value": shell_commands(CONTAINER_COMMAND)},
            ]},
            "credentials": {"secrets": {"entry": [{"key": "tfdist.secret", "value": b64(secret.encode())}]}},
        },
    }


def container_env(driver: tuple[str, int], token: str, role: str, tasks: list[dict[str, Any]],
                  python: str, agent_zip: bytes, workdir: dict[str, Any] | None = None) -> dict[str, str]:
    """What every container of one role gets (all values base64 or plain words). ``workdir``:
    the shipped working directory's size and SHA-256 (tfdist sends it over the channel)."""
    job: dict[str, Any] = {"driver": list(driver), "token": token, "role": role, "tasks": tasks}
    if workdir is not None:
        job["workdir"] = workdir
    return {
        "TFDIST_PYTHON": python,
        "TFDIST_BOOT": b64(BOOT.encode()),
        "TFDIST_AGENT": b64(agent_zip),
        "TFDIST_YARN_JOB": b64(json.dumps(job).encode()),
    }


#: NodeManager states whose containers are gone (or going): the RM has given up on the node.
GONE_NODE_STATES = ("LOST", "SHUTDOWN", "DECOMMISSIONED", "REBOOTED")


def lost_nodes(placed: dict[str, str], nodes: list[dict[str, Any]]) -> dict[str, str]:
    """Which tasks ran on a NodeManager the RM has given up on: ``{task: why}``, from each
    task's node id (``NM_HOST:NM_PORT``, as its agent reported; the RM's ``id`` of the node:
    a LOST node's entry has no web address left) and the RM's nodes (``/ws/v1/cluster/nodes``).
    A node that came back at the same address (a restarted NodeManager registers as RUNNING
    again) is not lost, whatever its old entry."""
    states: dict[str, set[str]] = {}
    for node in nodes:
        where = str(node.get("id") or "")
        states.setdefault(where, set()).add(str(node.get("state") or ""))
    out = {}
    for task, where in placed.items():
        seen = states.get(where, set())
        gone = sorted(seen & set(GONE_NODE_STATES))
        if gone and "RUNNING" not in seen:
            out[task] = f"its node {where} is {gone[0]} at the ResourceManager"
    return out


def lost_container(info: dict[str, Any], ended: str, agents: dict[str, dict[str, Any]]) -> str:
    """Why a task whose agent's connection ended (``ended``: closed, or silent for how long)
    is lost, in one line naming its container, node and host and this job's tasks on that
    node (``agents``: every task's agent's report), so a node that died is named at once,
    before the ResourceManager gives up on it."""
    there = sorted(n for n, i in agents.items() if i.get("node") == info.get("node"))
    where = f"node {info.get('node')} on host {info.get('hostname')} ({info.get('host')})"
    tasks = f"this job's tasks on that node: {', '.join(there)}"
    how = "went silent" if ended.startswith("silent") else "ended"
    return f"its YARN container {how} (container {info.get('container')} on {where} lost, or killed; {tasks})"


#: The ContainerExitStatus of a container its NodeManager killed for memory: over its
#: virtual (-103) or physical (-104) memory (``yarn.nodemanager.vmem/pmem-check-enabled``).
MEMORY_EXIT_STATUSES = {-103: "virtual", -104: "physical"}
#: ContainerExitStatus.INVALID: the container has not ended (as far as the NodeManager knows).
NOT_ENDED = -1000
_BEYOND = re.compile(r"beyond the '(PHYSICAL|VIRTUAL)' memory limit")


def exit_status(container: dict[str, Any] | None) -> int:
    """A NodeManager's ``exitCode`` of a container; :data:`NOT_ENDED` when it has none."""
    try:
        return int((container or {}).get("exitCode", NOT_ENDED))
    except (TypeError, ValueError):
        return NOT_ENDED


def memory_kill(container: dict[str, Any] | None, memory_mb: int) -> str | None:
    """The root cause of a task whose container its NodeManager killed for memory (as its
    REST API reports the container: exit status -103/-104, or its diagnostics ``... is
    running 52379648B beyond the 'PHYSICAL' memory limit. Current usage: 562.0 MB of 512 MB
    physical memory used; ...``): the line every backend gives a task killed for memory,
    with what YARN saw; None for any other end."""
    code = exit_status(container)
    diagnostics = str((container or {}).get("diagnostics") or "")
    beyond = _BEYOND.search(diagnostics)
    if code not in MEMORY_EXIT_STATUSES and not beyond:
        return None
    kind = beyond.group(1).lower() if beyond else MEMORY_EXIT_STATUSES[code]
    usage = re.search(rf"([0-9.]+ ?[KMGT]?B) of ([0-9.]+ ?[KMGT]?B) {kind} memory used", diagnostics)
    seen = f", {usage.group(1)} of {usage.group(2)} used" if usage else ""
    return (f"{describe_memory_kill(memory_mb * 2**20)} (YARN's NodeManager killed its container for {kind} "
            f"memory{seen}, exit status {code})")


def node_totals(node: dict[str, Any]) -> tuple[int, int]:
    """A NodeManager's whole capacity (MB, vcores) from its RM REST entry."""
    total = node.get("totalResource") or {}
    def both(a: str, b: str) -> int:
        return (_int(node.get(a)) or 0) + (_int(node.get(b)) or 0)

    memory = _int(total.get("memory")) or both("availMemoryMB", "usedMemoryMB")
    vcores = _int(total.get("vCores")) or both("availableVirtualCores", "usedVirtualCores")
    return memory, vcores


def no_longer_fits(asks: list[RoleAsk], nodes: list[dict[str, Any]], *,
                   ams: list[RoleAsk] | None = None, tasks: int | None = None) -> str | None:
    """Why the job's gang (every container at once: ``asks``, plus its ApplicationMasters'
    ``ams``, by default the distributed shell's, one per role) can no longer fit the
    NodeManagers left RUNNING (None: it may, once they are free): a container larger than
    every node left, or more in all than their whole capacity. ``tasks``: how many of the
    job's tasks the containers hold (default: one each; Spark's executors may hold several).
    The job's own application (an unmanaged AM) holds no container on any node: not counted."""
    left = [n for n in nodes if n.get("state") == "RUNNING"]
    totals = [node_totals(n) for n in left]
    names = ", ".join(sorted(str(n.get("nodeHostName") or n.get("id")) for n in left)) or "none"
    memory, vcores = sum(t[0] for t in totals), sum(t[1] for t in totals)
    masters = ams if ams is not None else [RoleAsk(f"{a.role}'s ApplicationMaster", 1, AM_MEMORY_MB, 1, 0)
                                           for a in asks]
    for a in [*asks, *masters]:
        if not any(a.memory_mb <= m and a.vcores <= v for m, v in totals):
            return (f"the job no longer fits the YARN cluster: {a.role}'s containers ({a.memory_mb} MB, "
                    f"{a.vcores} vcores) fit none of the NodeManagers left ({names})")
    need_memory = sum(a.count * a.memory_mb for a in [*asks, *masters])
    need_vcores = sum(a.count * a.vcores for a in [*asks, *masters])
    if need_memory > memory or need_vcores > vcores:
        shapes = "; ".join(a.describe() for a in asks)
        also = "an ApplicationMaster per role" if ams is None else "; ".join(a.describe() for a in ams)
        count = sum(a.count for a in asks) if tasks is None else tasks
        return (f"the job no longer fits the YARN cluster: its {count} tasks need "
                f"{need_vcores} vcores and {need_memory} MB at once ({shapes}, "
                f"and {also}); the NodeManagers left ({names}) have {vcores} vcores "
                f"and {memory} MB")
    return None


def node_lost(node: str, host: str, why: str, tasks: list[str], then: str) -> str:
    """The one line that names a node the RM gave up on, where it was, and this job's tasks
    on it (``then``: what happens to them)."""
    names = ", ".join(sorted(tasks))
    return f"node {node} on {host} is lost ({why}); this job's tasks on it: {names}; {then}"

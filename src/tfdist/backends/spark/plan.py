"""Pure decisions of the Spark backend: which master, how many task slots, what to say.

No pyspark and no I/O here (the checks run before a JVM starts, and the unit tests need no
Spark): what is read from the master is in :mod:`.probe`, the workdir archive in :mod:`.workdir`.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from tfdist.errors import SpecError

_LOCAL = re.compile(r"^local(\[(\*|\d+)(,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")


#: Spark reads the numbers of local[N,F] and local-cluster[W,C,M] as Java ints.
_JAVA_INT = 2**31 - 1


def master_kind(master: str) -> str:
    """``local``, ``local-cluster``, ``standalone``, ``k8s`` or ``yarn``; SpecError otherwise."""
    local = "local" if _LOCAL.match(master) else "local-cluster" if _LOCAL_CLUSTER.match(master) else None
    if local:
        for number in re.findall(r"\d+", master):
            if len(number) > 10 or int(number) > _JAVA_INT:
                shown = number[:20] + "..." * (len(number) > 20)
                raise SpecError(f"spark.master: '{master[:80]}': {shown} is more than Spark reads "
                                f"(at most {_JAVA_INT:,})")
        return local
    if master.startswith("spark://") and master_endpoints(master):
        return "standalone"
    if master.startswith("k8s://"):
        return "k8s"
    if master == "yarn":
        return "yarn"
    raise SpecError(
        f"spark.master: '{master}' is not a Spark master URL; use local[N], "
        "local-cluster[W,C,M], spark://HOST:PORT, k8s://https://HOST:PORT or yarn"
    )


def master_endpoints(master: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a ``spark://h1:p1,h2:p2`` URL (several with standby masters)."""
    out = []
    for part in master[len("spark://"):].split(","):
        host, _, port = part.rpartition(":")
        if not host or not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
            return []
        out.append((host, int(port)))
    return out


def known_slots(master: str, task_cpus: int) -> int | None:
    """Task slots of a master whose size its URL says (local modes), else None."""
    m = _LOCAL.match(master)
    if m:
        n = m.group(2)
        cores = (os.cpu_count() or 1) if n in (None, "*") else int(n or 1)
        if m.group(1) is None:
            cores = 1
        return cores // task_cpus
    m = _LOCAL_CLUSTER.match(master)
    if m:
        return int(m.group(1)) * (int(m.group(2)) // task_cpus)
    return None


def standalone_slots(status: dict[str, Any], task_cpus: int) -> tuple[int, int, str]:
    """(slots in all, slots free now, a description) from a standalone master's JSON status."""
    alive = [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
    total = sum(int(w.get("cores", 0)) // task_cpus for w in alive)
    free = sum(int(w.get("coresfree", 0)) // task_cpus for w in alive)
    shown = ", ".join(f"{w.get('host')}: {w.get('cores')} cores ({w.get('coresfree')} free)"
                      for w in alive[:6])
    return total, free, f"{len(alive)} alive worker(s){': ' + shown if shown else ''}"


def unchecked_capacity(ui: str, reason: str, placement_timeout: float) -> str:
    """The warning for a standalone master whose capacity could not be read: a job larger
    than the cluster then waits the placement timeout before it fails, instead of being
    refused at once, so the user is told at start and shown the field that fixes it."""
    return (f"the Spark capacity check could not run: the master's status page did not answer "
            f"({reason}); a job larger than the cluster waits spark.placement_timeout_seconds "
            f"({placement_timeout:g} s) and then fails. Set spark.master_ui to the master's web UI "
            f"(default {ui}) so that tfdist can check before it starts")


def default_ui(master: str) -> str:
    host = master_endpoints(master)[0][0]
    return f"http://{host}:8080"


def task_cpus(cpus: list[float | None]) -> int:
    """``spark.task.cpus`` for the stage: one slot shape for every task (a barrier stage
    has one resource profile), the largest any role asks."""
    return max([1, *(math.ceil(c) for c in cpus if c)])


def lost_on_host(info: dict[str, Any], ended: str, agents: dict[str, dict[str, Any]]
                 ) -> tuple[list[str], str]:
    """The tasks on a dropped agent's host (``agents``: every task's agent's report) and why
    they are lost, in one line naming the host, the executor and them (``ended``: how the
    agent's connection ended, as AgentLink says)."""
    there = sorted(n for n, i in agents.items() if i.get("host") == info.get("host"))
    where = f"host {info.get('hostname')} ({info.get('host')})"
    executor = f"executor {info.get('executor')}"
    tasks = f"this job's tasks on that host: {', '.join(there)}"
    if ended.startswith("silent"):
        return there, f"its agent was {ended} ({where} cut off, or {executor} stuck; {tasks})"
    return there, f"its Spark task ended ({executor} on {where} lost, or the task killed; {tasks})"

"""Where a job's tasks are, as TF_CONFIG names them: the state the Spark, YARN and Ray backends share.

At reservation every task's agent reports the ``host:port`` it holds, and those addresses
are the job's: the supervisor writes them into each task's TF_CONFIG. Later a task may get
a new agent somewhere else (Spark: a new barrier stage after an executor was lost; YARN: a
replacement container on another node), and then the job's addresses are the new agents'
once every task has reported one (Ray: a task's replacement actor moves that task alone,
:meth:`Placement.move`). From that moment every attempt that starts gets a
TF_CONFIG whose cluster map names the new addresses (:meth:`Placement.retarget`) and the
supervisor is told a task's new address when it starts (:meth:`Placement.moved_address`).

Pure state, no I/O: the backends feed it their agents' reports. Readers may run on other
threads than the one adopting new addresses: the addresses and their cluster map are one
value, replaced whole, so a reader sees either the old pair or the new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tfdist.cluster import TaskId, cluster_map, needs_address, task_ids, with_cluster
from tfdist.contract import TF_CONFIG
from tfdist.jobspec.model import JobSpec


def reported(infos: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The ``host:port`` each agent reported (those that reported a port)."""
    return {n: f"{i['host']}:{i['port']}" for n, i in infos.items() if "port" in i}


class Placement:
    """The job's task addresses, and the cluster map tasks get once those moved."""

    def __init__(self, job: JobSpec) -> None:
        self._job = job
        tasks = task_ids(job)
        self._names = frozenset(t.name for t in tasks)
        #: The tasks in TF_CONFIG's cluster (the evaluator is not: its address is no news).
        self._trained = frozenset(t.name for t in tasks if needs_address(t))
        #: (each task's address, the cluster map once they moved: None while they are the reserved ones)
        self._state: tuple[dict[str, str], dict[str, list[str]] | None] = ({}, None)

    @property
    def addresses(self) -> dict[str, str]:
        """Each task's ``host:port`` as TF_CONFIG has it now (a copy)."""
        return dict(self._state[0])

    @property
    def moved(self) -> bool:
        """Whether the job's addresses are no longer the reserved ones."""
        return self._state[1] is not None

    def address(self, name: str) -> str | None:
        return self._state[0].get(name)

    def take(self, addresses: Mapping[str, str]) -> None:
        """The addresses at reservation (``{task: host:port}``) become the job's (not a move)."""
        self._state = (dict(addresses), None)

    def reserved(self, tasks: Iterable[TaskId]) -> dict[str, str]:
        """What a backend's ``reserve`` returns: the addresses of ``tasks`` that need one."""
        found = self._state[0]
        return {t.name: found[t.name] for t in tasks if t.name in found and needs_address(t)}

    def adopt(self, infos: Mapping[str, Mapping[str, Any]]) -> bool:
        """The agents now connected (``infos``: what each reported) become the job's addresses
        when every task has reported one and they differ from the job's; returns whether
        they did. A task with no address yet keeps the job where it is: a cluster map
        needs every member."""
        found = reported(infos)
        if not self._names <= set(found) or found == self._state[0]:
            return False
        self._state = (found, cluster_map(self._job, found))
        return True

    def move(self, name: str, address: str) -> bool:
        """Task ``name`` is now at ``address`` (its new actor's); returns whether that moved
        the job (a task with no address, the evaluator, moves nothing)."""
        addresses = self._state[0]
        if name not in addresses or addresses[name] == address:
            return False
        moved = {**addresses, name: address}
        self._state = (moved, cluster_map(self._job, moved))
        return True

    def moved_address(self, name: str) -> str | None:
        """Task ``name``'s address once the job moved and it is in the cluster map (None:
        unchanged, or not a member)."""
        addresses, cluster = self._state
        return addresses.get(name) if cluster is not None and name in self._trained else None

    def retarget(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with TF_CONFIG's cluster map the current one (unchanged before a move)."""
        cluster = self._state[1]
        if cluster is not None and TF_CONFIG in env:
            env[TF_CONFIG] = with_cluster(env[TF_CONFIG], cluster)
        return env

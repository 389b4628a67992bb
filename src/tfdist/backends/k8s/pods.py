"""What a pod's state means for its task: a pure function of the pod as the API returns it.

Kept apart from the I/O so that every case (image pull errors, CrashLoopBackOff,
Unschedulable past its grace, eviction, deletion) is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tfdist.jobspec.model import memory_bytes
from tfdist.jobspec.tfjob import CONTAINER
from tfdist.states import describe_memory_kill

#: Exit code reported for a task whose container never ran (as a shell's "cannot run");
#: below 128, so the exit-code restart policy treats it as permanent.
EXIT_NOT_STARTED = 127
#: Exit code for a pod killed without its container reporting one (evicted, node lost).
EXIT_KILLED = 137
#: Waiting reasons that will not resolve by waiting.
FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)


#: Terminated reasons that add nothing to the exit code.
PLAIN_REASONS = frozenset({"Completed", "Error"})


@dataclass(frozen=True)
class PodView:
    """What one observation of a pod means for its task."""

    started: bool = False
    ended: bool = False
    exit_code: int | None = None
    reason: str | None = None
    host: str | None = None
    delete: bool = False  # the pod must be deleted: it would otherwise linger or start late
    unscheduled: bool = False  # waiting for a node: judged again as its grace runs out


def _container_status(pod: dict[str, Any]) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return status
    return {}


def memory_limit(pod: dict[str, Any]) -> int | None:
    """The task container's memory limit in bytes, as the pod spec holds it (None: none, or
    a quantity the spec's rule does not read)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == CONTAINER:
            quantity = ((container.get("resources") or {}).get("limits") or {}).get("memory")
            try:
                return memory_bytes(str(quantity)) if quantity is not None else None
            except ValueError:
                return None
    return None


def _with_message(reason: str, message: str | None) -> str:
    return f"{reason}: {message}" if message else reason


#: The reason of a pod deleted by someone else (kubectl, an operator, the scheduler
#: preempting it) while its task ran: the kubelet sent SIGTERM, so under MultiWorkerMirrored
#: every worker saves and exits 143 alike, and only this says which pod was taken away.
DELETED_OUTSIDE = "pod deleted outside tfdist"


def deleted_outside(pod: dict[str, Any]) -> str | None:
    """Why a pod is being deleted, when the API says it is (``deletionTimestamp``): the
    reason, with the pod's DisruptionTarget condition when it has one (preemption, taint
    eviction, the eviction API); None while it is not being deleted. Only the caller knows
    whether tfdist itself sent the delete."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True" and cond.get("reason"):
            return f"{DELETED_OUTSIDE} ({_with_message(cond['reason'], cond.get('message'))})"
    return DELETED_OUTSIDE


def observe(
    pod: dict[str, Any],
    *,
    waited: float = 0.0,
    grace: float = 60.0,
    deleted: bool = False,
    ours: bool = False,
) -> PodView:
    """Map a pod (as the API returns it) to started / ended / exit code / reason.

    ``waited`` is how long the pod has existed, ``grace`` how long it may stay
    unschedulable, ``deleted`` whether the API reported it gone, ``ours`` whether tfdist
    deleted it (a stop): a pod deleted by anyone else ends with :data:`DELETED_OUTSIDE` as
    its reason, whatever exit code its container gave to the SIGTERM.
    """
    status = pod.get("status") or {}
    phase = status.get("phase")
    host = (pod.get("spec") or {}).get("nodeName")
    cstatus = _container_status(pod)
    state = cstatus.get("state") or {}
    terminated = state.get("terminated")
    ran = "running" in state or bool(terminated and terminated.get("startedAt"))
    ran = ran or bool((cstatus.get("lastState") or {}).get("terminated"))
    if terminated:
        code = int(terminated.get("exitCode", EXIT_KILLED))
        reason = terminated.get("reason")
        shown = None if reason in PLAIN_REASONS or not reason else reason
        if reason == "OOMKilled":  # Kubernetes' word, then the words a local task's cgroup kill has
            shown = f"OOMKilled: {describe_memory_kill(memory_limit(pod))}"
        if phase == "Failed" and status.get("reason"):
            # the pod's own reason says why: an evicted pod's container reads only
            # ContainerStatusUnknown (or Error) with 137, as after any kill
            shown = _with_message(status["reason"], status.get("message"))
        outside = None if ours else deleted_outside(pod)
        if outside and shown is None:  # a plain exit after the kubelet's SIGTERM
            shown = outside
        return PodView(ran, True, code, shown, host)
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in FATAL_WAITING:
        last = (cstatus.get("lastState") or {}).get("terminated") or {}
        code = int(last.get("exitCode", EXIT_NOT_STARTED))
        reason = _with_message(waiting["reason"], waiting.get("message"))
        return PodView(ran, True, code, reason, host, delete=True)
    if phase == "Succeeded":
        return PodView(True, True, 0, None, host)
    if phase == "Failed":
        reason = _with_message(status.get("reason") or "Failed", status.get("message"))
        return PodView(ran, True, EXIT_KILLED, reason, host)
    if deleted:
        reason = (None if ours else deleted_outside(pod)) or "pod deleted"
        return PodView(ran, True, EXIT_KILLED, reason, host)
    unscheduled = False
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            if waited >= grace:
                reason = _with_message("Unschedulable", cond.get("message"))
                return PodView(False, True, EXIT_NOT_STARTED, reason, host, delete=True)
            unscheduled = True
    return PodView("running" in state, False, None, None, host, unscheduled=unscheduled)


def iter_lines(chunks: Iterator[bytes | str]) -> Iterator[str]:
    """Split a byte stream into lines, keeping a last line without a newline."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk.encode() if isinstance(chunk, str) else chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", errors="replace").rstrip("\r")
    if buffer:
        yield buffer.decode("utf-8", errors="replace")

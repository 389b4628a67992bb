"""Run a job's tasks as pods on a Kubernetes cluster, supervised by tfdist.

I/O only: every object comes from :mod:`tfdist.backends.manifests` and every decision
about what a pod's state means from :func:`observe`, a pure function. The official
``kubernetes`` client is imported when the backend is built, never by ``import tfdist``.

How it works, and why:

- ``reserve`` creates the headless Service (stable DNS names, so TF_CONFIG can be written
  before any pod exists) and the NetworkPolicy, then starts one *watch* on the run's pods:
  state changes arrive as they happen, not at a polling interval.
- ``start`` creates one bare pod per task attempt (``restartPolicy: Never``): the
  supervisor decides restarts, so no Job controller may restart behind its back.
- When a pod's container starts, a thread follows its log and turns each line into an
  Output event (or a Progress event for ``TFDIST_PROGRESS`` lines); the supervisor writes
  them to the run directory, so logs survive the pod. Exited is reported after the last
  line has been read.
- A pod that cannot start is a failure now, not a wait forever (kubeflow/trainer #1131):
  image pull errors, CrashLoopBackOff, bad container config immediately; Unschedulable
  after ``kubernetes.unschedulable_timeout_seconds`` (default 60; a cluster autoscaler may be
  adding a node). The reason goes into the Exited event.
- ``stop`` deletes pods (graceful, with the job's grace period) and waits for their end;
  ``close`` deletes everything the run created. Should this process be killed before
  ``close``, a small reaper process (k8s_reaper.py) deletes it instead.

Tested against an in-process fake API server (tests/k8s/fake_apiserver.py) that the real
client talks to over HTTP; not yet against a real cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdist.backends import k8s_reaper, manifests
from tfdist.backends.base import Backend, Exited, Started, line_event
from tfdist.cluster import Task, TaskId, needs_address
from tfdist.errors import BackendError, SpecError
from tfdist.spec import JobSpec

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


def _raw(call: Any, *args: Any, **kwargs: Any) -> bytes:
    """Call the API, read the response body unparsed, give the connection back.

    tfdist works on plain dicts; the client's models would also reject fields they do not
    know (seen with a deleted Service's status), failing a call that had succeeded.
    """
    resp = call(*args, _preload_content=False, **kwargs)
    try:
        return bytes(resp.data)
    finally:
        resp.release_conn()


#: Terminated reasons that add nothing to the exit code.
PLAIN_REASONS = frozenset({"Completed", "Error"})


# -- decisions (pure) ---------------------------------------------------------------


@dataclass(frozen=True)
class PodView:
    """What one observation of a pod means for its task."""

    started: bool = False
    ended: bool = False
    exit_code: int | None = None
    reason: str | None = None
    host: str | None = None
    delete: bool = False  # the pod must be deleted: it would otherwise linger or start late


def _container_status(pod: dict[str, Any]) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == manifests.CONTAINER:
            return status
    return {}


def _with_message(reason: str, message: str | None) -> str:
    return f"{reason}: {message}" if message else reason


def observe(
    pod: dict[str, Any], *, waited: float = 0.0, grace: float = 60.0, deleted: bool = False
) -> PodView:
    """Map a pod (as the API returns it) to started / ended / exit code / reason.

    ``waited`` is how long the pod has existed, ``grace`` how long it may stay
    unschedulable, ``deleted`` whether the API reported it gone.
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
        return PodView(ran, True, EXIT_KILLED, "pod deleted", host)
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
            and waited >= grace
        ):
            reason = _with_message("Unschedulable", cond.get("message"))
            return PodView(False, True, EXIT_NOT_STARTED, reason, host, delete=True)
    return PodView("running" in state, False, None, None, host)


def run_id_of(run_dir: Path) -> str:
    """A label value naming this run (the run directory's name, made label-safe)."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(run_dir).name)[:63].strip("-_.")
    return value or "run"


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


# -- I/O ----------------------------------------------------------------------------


@dataclass
class _Pod:
    """What the backend knows of one task attempt's pod."""

    name: str
    task: str
    attempt: int
    created: float = field(default_factory=time.monotonic)
    last: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False
    started: bool = False
    ended: bool = False
    logs: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _api_error(err: Exception, what: str) -> BackendError:
    status = getattr(err, "status", None)
    body = getattr(err, "body", None)
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    if body:
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(body).get("message") or message
    prefix = f"{status} " if status else ""
    return BackendError(f"kubernetes: {what} failed: {prefix}{message}")


def _interrupt(resp: Any) -> None:
    """End a streaming response that another thread is reading.

    ``resp.close()`` would wait for the reader's lock until the next byte arrives (up to
    the watch timeout); shutting the socket down makes the blocked read return at once.
    """
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def load_api_client() -> Any:
    """An ApiClient from the in-cluster service account or the kubeconfig (KUBECONFIG)."""
    from kubernetes import client, config

    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config()
    except Exception as err:  # the client raises several unrelated types here
        raise BackendError(
            f"kubernetes: no cluster configuration ({err}); set KUBECONFIG or run in a pod"
        ) from None
    return client.ApiClient()


def delete_run_objects(
    api_client: Any, namespace: str, selector: str, objects: list[tuple[str, str]]
) -> list[str]:
    """Delete a run's pods (by label, at once) and the given (kind, name) Services and
    NetworkPolicies; return a line for each failure. Already gone is not a failure.

    Shared by :meth:`KubernetesBackend.close` and the reaper (k8s_reaper.py)."""
    from kubernetes import client

    core, net = client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)
    problems = []
    try:
        _raw(core.delete_collection_namespaced_pod, namespace, label_selector=selector,
             grace_period_seconds=0)
    except Exception as err:
        problems.append(f"deleting pods: {_api_error(err, 'delete')}")
    for kind, name in reversed(objects):
        delete = core.delete_namespaced_service if kind == "Service" else net.delete_namespaced_network_policy
        try:
            _raw(delete, name, namespace)
        except Exception as err:
            if getattr(err, "status", None) != 404:
                problems.append(f"deleting {kind} {name}: {_api_error(err, 'delete')}")
    return problems


class KubernetesBackend(Backend):
    """Tasks as pods; see the module docstring."""

    name = "kubernetes"
    #: Seconds to wait for the last log lines of an ended pod before reporting Exited.
    log_drain_timeout = 10.0
    #: Server-side timeout of one watch request (the watch is then resumed).
    watch_timeout = 30

    def __init__(self, job: JobSpec, run_dir: Path, *, api_client: Any = None) -> None:
        super().__init__(job, run_dir)
        self.namespace = job.kubernetes.namespace
        #: Seconds a pod may wait for a node before its task is reported failed.
        self.unschedulable_grace = job.kubernetes.unschedulable_timeout_seconds
        self.run_id = ""  # set by reserve(): the run directory may be renamed until then
        self.selector = ""
        self._api_client = api_client
        self._core: Any = None
        self._net: Any = None
        self._lock = threading.RLock()
        self._pods: dict[str, _Pod] = {}
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch_resp: Any = None
        self._created: list[dict[str, Any]] = []
        self._own_client = api_client is None
        self._reaper: subprocess.Popen[str] | None = None

    # -- setup ------------------------------------------------------------------------

    def check(self) -> None:
        manifests.check(self.job, "pods")
        try:
            import kubernetes  # noqa: F401
        except ImportError:
            raise SpecError(
                "--backend kubernetes: needs the kubernetes package; "
                "install it with: pip install 'tfdist[kubernetes]'"
            ) from None

    def _connect(self) -> None:
        if self._core is not None:
            return
        from kubernetes import client

        if self._api_client is None:
            self._api_client = load_api_client()
        self._core = client.CoreV1Api(self._api_client)
        self._net = client.NetworkingV1Api(self._api_client)

    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        """Create the Service and NetworkPolicy, start watching; addresses are DNS names."""
        self.check()
        self.run_id = run_id_of(self.run_dir)
        self.selector = f"{manifests.LABEL_RUN}={self.run_id},{manifests.LABEL_JOB}={self.job.name}"
        self._connect()
        self._start_reaper()
        for obj in manifests.run_objects(self.job, self.run_id):
            self._create(obj)
        self._spawn(self._watch_loop, "watch")
        self._spawn(self._tick_loop, "tick")
        found = manifests.addresses(self.job, "pods")
        return {t.name: found[t.name] for t in tasks if needs_address(t)}

    def _create(self, obj: dict[str, Any]) -> None:
        kind, name = obj["kind"], obj["metadata"]["name"]
        try:
            if kind == "Service":
                _raw(self._core.create_namespaced_service, self.namespace, obj)
            elif kind == "NetworkPolicy":
                _raw(self._net.create_namespaced_network_policy, self.namespace, obj)
            else:
                _raw(self._core.create_namespaced_pod, self.namespace, obj)
        except Exception as err:
            if getattr(err, "status", None) == 409:
                raise BackendError(
                    f"kubernetes: a {kind} named {name} already exists in namespace "
                    f"{self.namespace}; is the job still running? Stop it, or delete it with "
                    f"kubectl delete {kind.lower()} -n {self.namespace} {name}"
                ) from None
            raise _api_error(err, f"creating {kind} {name}") from None
        if kind != "Pod":
            self._created.append(obj)
            self._tell_reaper(f"+{kind} {name}")

    def _spawn(self, target: Any, name: str, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=f"k8s-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    # -- tasks ------------------------------------------------------------------------

    def start(self, task: Task, attempt: int) -> None:
        body = manifests.task_pod(self.job, task, attempt, self.run_id)
        pod = _Pod(body["metadata"]["name"], task.name, attempt)
        with self._lock:
            earlier = [p for p in self._pods.values() if p.task == task.name]
            self._pods[pod.name] = pod
        for old in earlier:  # same hostname: the new pod must not share DNS with a dead one
            self._delete_pod(old.name, 0)
        try:
            self._create(body)
        except BackendError as err:
            with self._lock:
                pod.ended = True
            self._emit(Exited(task.name, attempt, time.time(), EXIT_NOT_STARTED, str(err)))
            pod.done.set()

    def stop(self, names: list[str], grace: float) -> None:
        wanted = set(names)
        with self._lock:
            pods = [p for p in self._pods.values() if p.task in wanted and not p.ended]
        for pod in pods:
            self._delete_pod(pod.name, grace)
        deadline = time.monotonic() + grace + 15
        for pod in pods:
            if not pod.done.wait(max(0.0, deadline - time.monotonic())):
                self._finish(pod, PodView(pod.started, True, -9, "no end confirmed by the API"))

    def _delete_pod(self, name: str, grace: float) -> None:
        try:
            _raw(
                self._core.delete_namespaced_pod,
                name,
                self.namespace,
                grace_period_seconds=int(grace),
            )
        except Exception as err:
            if getattr(err, "status", None) != 404:
                self._note(f"deleting pod {name}: {_api_error(err, 'delete')}")

    def close(self) -> None:
        """Delete every pod of the run, the Service and the NetworkPolicy; stop watching."""
        self._closing.set()
        _interrupt(self._watch_resp)
        if self._core is not None:
            created = [(obj["kind"], obj["metadata"]["name"]) for obj in self._created]
            for problem in delete_run_objects(self._api_client, self.namespace, self.selector, created):
                self._note(problem)
            self._created.clear()
        self._dismiss_reaper()
        for thread in self._threads[:2]:  # the watch and the ticker
            thread.join(timeout=2)

    # -- the reaper: cleans up if this process is killed before close() -------------------

    def _start_reaper(self) -> None:
        """Start k8s_reaper.py and tell it what to delete should this process die."""
        settings = None if self._own_client else k8s_reaper.config_of(self._api_client)
        header = {"namespace": self.namespace, "selector": self.selector, "config": settings}
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "tfdist.backends.k8s_reaper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C or a killed process group spares it
        )
        self._tell_reaper(json.dumps(header))

    def _tell_reaper(self, line: str) -> None:
        reaper = self._reaper
        if reaper is not None and reaper.stdin is not None and reaper.poll() is None:
            with contextlib.suppress(OSError):
                reaper.stdin.write(line + "\n")
                reaper.stdin.flush()

    def _dismiss_reaper(self) -> None:
        reaper, self._reaper = self._reaper, None
        if reaper is None:
            return
        with contextlib.suppress(OSError):
            if reaper.stdin is not None:
                reaper.stdin.write("exit\n")
                reaper.stdin.close()
        try:
            reaper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            reaper.kill()
            reaper.wait()

    # -- watching -----------------------------------------------------------------------

    def _watch_loop(self) -> None:
        """List, then watch from the list's resourceVersion; re-list when it expires."""
        version: str | None = None
        while not self._closing.is_set():
            try:
                if version is None:
                    resp = self._core.list_namespaced_pod(
                        self.namespace, label_selector=self.selector, _preload_content=False
                    )
                    listing = json.loads(resp.data)
                    version = listing["metadata"].get("resourceVersion")
                    for item in listing.get("items") or []:
                        self._on_pod("MODIFIED", item)
                resp = self._core.list_namespaced_pod(
                    self.namespace,
                    label_selector=self.selector,
                    watch=True,
                    resource_version=version,
                    timeout_seconds=self.watch_timeout,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                )
                self._watch_resp = resp
                for line in iter_lines(resp.stream(amt=None, decode_content=False)):
                    if self._closing.is_set():
                        break
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = None  # 410 Gone and friends: list again
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        self._on_pod(event["type"], obj)
                resp.release_conn()
            except Exception as err:
                if self._closing.is_set():
                    return
                self._note(f"watch interrupted ({type(err).__name__}: {err}); resuming")
                version = None
                self._closing.wait(0.5)
            finally:
                self._watch_resp = None

    def _tick_loop(self) -> None:
        """Re-judge pending pods once a second (Unschedulable has no event of its own)."""
        while not self._closing.wait(1.0):
            with self._lock:
                pods = [p for p in self._pods.values() if p.last and not p.ended]
            for pod in pods:
                self._judge(pod)

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        with self._lock:
            pod = self._pods.get(str(name))
            if pod is None:
                return
            pod.last = obj
            pod.deleted = pod.deleted or kind == "DELETED"
        self._judge(pod)

    def _judge(self, pod: _Pod) -> None:
        with self._lock:
            if pod.ended:
                return
            view = observe(
                pod.last,
                waited=time.monotonic() - pod.created,
                grace=self.unschedulable_grace,
                deleted=pod.deleted,
            )
            if view.started and not pod.started:
                pod.started = True
                self._emit(Started(pod.task, pod.attempt, time.time(), host=view.host))
                pod.logs = self._spawn(self._follow_logs, f"logs-{pod.name}", pod)
            if not view.ended:
                return
            pod.ended = True
        self._spawn(self._finish, f"end-{pod.name}", pod, view)

    def _finish(self, pod: _Pod, view: PodView) -> None:
        """Report Exited after the last log line; delete a pod that would linger."""
        if pod.done.is_set():
            return
        if pod.logs is not None and pod.logs is not threading.current_thread():
            pod.logs.join(timeout=self.log_drain_timeout)
        if view.delete and not pod.deleted:
            self._delete_pod(pod.name, 0)
        with self._lock:
            if pod.done.is_set():
                return
            pod.ended = True
            code = EXIT_KILLED if view.exit_code is None else view.exit_code
            self._emit(Exited(pod.task, pod.attempt, time.time(), code, view.reason))
            pod.done.set()  # after the event: stop() returns only once it is queued

    def _follow_logs(self, pod: _Pod) -> None:
        try:
            resp = self._core.read_namespaced_pod_log(
                pod.name,
                self.namespace,
                container=manifests.CONTAINER,
                follow=True,
                _preload_content=False,
            )
            for line in iter_lines(resp.stream(amt=None, decode_content=False)):
                self._emit(line_event(pod.task, pod.attempt, time.time(), line))
            resp.release_conn()
        except Exception as err:
            if not (self._closing.is_set() or pod.deleted):
                self._note(f"log of {pod.name} ended early: {_api_error(err, 'reading log')}")

    def _emit(self, event: Any) -> None:
        self.events.put(event)

    def _note(self, message: str) -> None:
        """Backend trouble that is no task's output: kept in ``<run_dir>/kubernetes.log``."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / "kubernetes.log", "a") as handle:
                handle.write(f"{stamp} {message}\n")
        except OSError:
            pass

"""Run a job's tasks as pods on a Kubernetes cluster, supervised by tfdist.

I/O only: every object comes from :mod:`.supervised` (built from :mod:`.manifests`),
every name from :mod:`.names`, and every decision about what a pod's state means from
:func:`.pods.observe`, a pure function. The official ``kubernetes`` client is imported
when the backend is built, never by ``import tfdist``.

How it works, and why:

- ``reserve`` creates the ConfigMap of the shipped workdir when the job ships it
  (:mod:`.workdir`), the leave program's when its chief or workers run it (:mod:`.leave`)
  and the ConfigMap with the cluster map (each pod's TF_CONFIG is put
  together from it by the kubelet, :mod:`.supervised` says why), the headless Service
  (stable DNS names, so TF_CONFIG can be written before any pod exists) and the
  NetworkPolicy, then starts one *watch* on the run's pods (:mod:`.watch`): state changes
  arrive as they happen, not at a polling interval.
- ``start`` creates one bare pod per task attempt (``restartPolicy: Never``): the
  supervisor decides restarts, so no Job controller may restart behind its back. It only
  queues the create: a small pool sends several at once (:mod:`.creates`, which says why
  its bound respects the API server's priority and fairness).
- A create refused with a client error (403 forbidden or over quota, 422 invalid) is a
  failed attempt that cannot be retried (``Exited.final``), so the job ends on the first
  one with its message as the one line; a server error may be retried by the policy.
- ``stop`` never leaves a pod behind while creates are in flight: creates still queued
  are cancelled (none is sent after the stop), creates in flight are waited for, then
  their pods are deleted; ``close`` likewise drains the pool before deleting by label.
- When a pod's container starts, a thread follows its log and turns each line into an
  Output event (or a Progress event for ``TFDIST_PROGRESS`` lines); the supervisor writes
  them to the run directory, so logs survive the pod. Exited is reported after the last
  line has been read. While creates are still queued or in flight, the log requests wait
  for them (:meth:`.creates.Creates.after`; a pod that ends meanwhile has its log read at
  once): a followed log starts from the container's first line, so nothing is lost, and
  on a shared control plane each log request (a thread here, a request proxied to the
  kubelet there) competes with the creates for the API server's CPU. A distributed job
  waits for all its tasks anyway.
- Every request goes through :func:`.client.call`, not the client's generated methods,
  whose model validation costs this process's CPU once per pod (:mod:`.client` says how
  much).
- A pod that cannot start is a failure now, not a wait forever (kubeflow/trainer #1131):
  image pull errors, CrashLoopBackOff, bad container config immediately; Unschedulable
  after ``kubernetes.unschedulable_timeout_seconds`` (default 60; a cluster autoscaler may be
  adding a node). The reason goes into the Exited event.
- ``stop`` deletes pods (graceful, with the job's grace period) and waits for their end;
  ``close`` deletes everything the run created. Should this process be killed before
  ``close``, a small reaper process (:mod:`.reaper`) deletes it instead.

Tested against a real control plane (kube-apiserver, scheduler and controllers, with kwok
playing the kubelet; tests/backends/k8s/test_real_backend.py) and, for log streams and container
failure reasons that kwok does not play, an in-process fake API server
(tests/backends/k8s/fake_apiserver.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tfdist.backends.base import Backend, BackendOptions, Exited, Started, line_events
from tfdist.backends.k8s import names, reaper, supervised, workdir
from tfdist.backends.k8s.client import (
    api_error,
    call,
    delete_run_objects,
    load_api_client,
    load_configuration,
    path,
    request,
    retry_after,
)
from tfdist.backends.k8s.creates import (
    CANCELLED,
    CREATE_CONCURRENCY,
    CREATING,
    QUEUED,
    REQUEST_TIMEOUT,
    Creates,
)
from tfdist.backends.k8s.pods import (
    EXIT_KILLED,
    EXIT_NOT_STARTED,
    PodView,
    deleted_outside,
    iter_lines,
    observe,
)
from tfdist.backends.k8s.watch import PodWatch
from tfdist.cluster import Task, TaskId, needs_address
from tfdist.errors import BackendError, SpecError
from tfdist.jobspec.model import JobSpec
from tfdist.jobspec.tfjob import CONTAINER
from tfdist.node import watchdog

if TYPE_CHECKING:
    from tfdist.data.plan import DataPlan

#: Log requests awaiting their answer at once (:meth:`KubernetesBackend._open_log`): as
#: many as creates, so that with the watch they fit the connection pool.
LOG_OPENS = CREATE_CONCURRENCY
#: Seconds a log request waits for its turn before it is sent anyway.
LOG_OPEN_WAIT = 5.0


#: Seconds between looks at the watched pods while a restarted chief waits for the servers'
#: addresses (:meth:`KubernetesBackend._await_servers`; in memory, no request).
SERVER_ADDRESS_POLL = 0.2


class _NotSent(Exception):
    """A held create that a stop took back before it was sent."""


@dataclass
class _Pod:
    """What the backend knows of one task attempt's pod."""

    name: str
    task: str
    attempt: int
    created: float = field(default_factory=time.monotonic)
    last: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False
    #: tfdist sent this pod's delete (a stop, a restart, the end): not someone else's.
    ours: bool = False
    #: Someone else is deleting it (``pods.deleted_outside``): its Exited goes first.
    outside: bool = False
    started: bool = False
    ended: bool = False
    #: The last observation said Unschedulable: the ticker re-judges it (the grace runs out
    #: without an event).
    unscheduled: bool = False
    logs: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)
    create: str = QUEUED  # see .creates
    #: Set once the create has returned (or was cancelled): only then can a delete find it.
    sent: threading.Event = field(default_factory=threading.Event)
    #: Set by stop() and close(): a create shed with 429 is not sent again.
    halt: threading.Event = field(default_factory=threading.Event)


class KubernetesBackend(Backend):
    """Tasks as pods; see the module docstring."""

    name = "kubernetes"
    #: A pod's DNS name leaves the headless Service with the pod (see Backend).
    addresses_vanish = True
    #: Seconds to wait for the last log lines of an ended pod before reporting Exited.
    log_drain_timeout = 10.0

    def __init__(self, job: JobSpec, options: BackendOptions | None = None) -> None:
        super().__init__(job, options)
        api_client = self.options.kubernetes_client
        self.namespace = job.kubernetes.namespace
        #: Seconds a pod may wait for a node before its task is reported failed.
        self.unschedulable_grace = job.kubernetes.unschedulable_timeout_seconds
        self.run_id = ""  # set by reserve(): the run directory may be renamed until then
        self.selector = ""
        self._api_client = api_client
        self._conf: Any = None  # the client's Configuration, read by check()
        self._connected = False
        self._lock = threading.RLock()
        self._pods: dict[str, _Pod] = {}
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch: PodWatch | None = None
        self._created: list[dict[str, Any]] = []
        self._own_client = api_client is None
        self._reaper: subprocess.Popen[str] | None = None
        self._creates: Creates | None = None
        self._noted = False  # kubernetes.log's directory was made
        self._log_opens = threading.BoundedSemaphore(LOG_OPENS)
        self._archive: bytes | None = None  # the shipped workdir (kubernetes.ship_workdir)

    # -- setup ------------------------------------------------------------------------

    def check(self) -> None:
        names.check(self.job, "pods")
        supervised.cluster_config_map(self.job, "check")  # refuses a map over 1 MiB
        if self._archive is None and workdir.ships(self.job):
            self._archive = workdir.pack(self.job)  # refuses a workdir over 1 MiB packed
        try:
            import kubernetes  # noqa: F401
        except ImportError:
            raise SpecError(
                "--backend kubernetes: needs the kubernetes package; "
                "install it with: pip install 'tfdist[kubernetes]'"
            ) from None
        if self._api_client is None and self._conf is None:  # before any run directory
            self._conf = load_configuration()

    def warnings(self) -> list[str]:
        unshared = names.unshared_saves(self.job)
        return [unshared] if unshared else []

    def check_data(self, plan: DataPlan) -> None:
        """Pods get streamed inputs given whole (``mode: stream``, ``shard: none``): the same
        URIs for every pod, so they ride in each pod's env like the job's own. Staging, sharding
        and outputs need tfdist on the node where a task runs, which a pod does not have."""
        for name, spec in sorted(self.job.data.items()):
            if spec.mode != "stream" or spec.shard != "none":
                raise SpecError(f"data.{name}: the kubernetes backend takes mode: stream with shard: none "
                                "only (every pod gets the URIs and reads them itself); shard inside the "
                                "script, or run on the local, spark, yarn or ray backend")
        if plan.outputs:
            raise SpecError("outputs: the kubernetes backend cannot copy outputs from pods; save to a "
                            "volume (kubernetes.model_volume_claim) or to your store from the script")

    def use_data(self, plan: DataPlan) -> None:
        super().use_data(plan)
        first = next(iter(plan.shares), None)
        env = plan.task_env(first) if first else {}
        self.job = dataclasses.replace(self.job, env={**self.job.env, **env})

    def _connect(self) -> None:
        if self._api_client is None:  # a handed client keeps its own pool size
            self._api_client = load_api_client(pool_size=CREATE_CONCURRENCY + 2, conf=self._conf)  # + watch
        self._connected = True

    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        """Create the ConfigMap, Service and NetworkPolicy, start watching; addresses are
        DNS names."""
        self.check()
        self.run_id = names.run_id_of(self.run_dir)
        self.selector = f"{names.LABEL_RUN}={self.run_id},{names.LABEL_JOB}={self.job.name}"
        self._connect()
        self._start_reaper()
        for obj in supervised.run_objects(self.job, self.run_id, self._archive):
            self._create(obj)
        self._watch = PodWatch(self._api_client, self.namespace, self.selector, self._on_pod, self._note,
                               self._closing)
        self._spawn(self._watch.run, "watch")
        self._spawn(self._tick_loop, "tick")
        self._creates = Creates(self._lock, self._closing)
        found = names.addresses(self.job, "pods")
        return {t.name: found[t.name] for t in tasks if needs_address(t)}

    def _create(self, obj: dict[str, Any]) -> None:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind not in ("ConfigMap", "Service", "NetworkPolicy"):
            raise ValueError(f"pods are created by start(), not here: {name}")
        try:
            request(self._api_client, "POST", path(kind, self.namespace), body=obj)
        except Exception as err:
            raise self._create_error(err, kind, name) from None
        self._created.append(obj)
        self._tell_reaper(f"+{kind} {name}")

    def _create_error(self, err: Exception, kind: str, name: str) -> BackendError:
        if getattr(err, "status", None) == 409:
            return BackendError(
                f"kubernetes: a {kind} named {name} already exists in namespace "
                f"{self.namespace}; is the job still running? Stop it, or delete it with "
                f"kubectl delete {kind.lower()} -n {self.namespace} {name}"
            )
        return api_error(err, f"creating {kind} {name}")

    def _create_pod(self, obj: dict[str, Any], pod: _Pod) -> None:
        """One create; a 429 (the server's priority and fairness shed it) is sent again
        after its Retry-After, up to 5 times, unless the pod is stopped meanwhile."""
        pods = path("Pod", self.namespace)
        for sent in range(6):
            try:
                request(self._api_client, "POST", pods, body=obj, timeout=REQUEST_TIMEOUT)
                return
            except Exception as err:
                wait = retry_after(err)
                if wait is None or sent == 5 or pod.halt.wait(wait):
                    raise

    def _spawn(self, target: Any, name: str, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=f"k8s-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    # -- tasks ------------------------------------------------------------------------

    def start(self, task: Task, attempt: int) -> None:
        """Queue the pod's create (see the module docstring); Exited reports a failure."""
        body = supervised.task_pod(self.job, task, attempt, self.run_id)
        pod = _Pod(body["metadata"]["name"], task.name, attempt)
        with self._lock:
            earlier = []  # a first attempt has none: no scan of every pod for each of 1,000 starts
            if attempt:
                earlier = [p for p in self._pods.values() if p.task == task.name and not p.deleted]
            self._pods[pod.name] = pod
        creates = self._creates
        if creates is None or self._closing.is_set():
            self._cancel([pod], "not created: the run is closing")
            return

        def send() -> None:
            for old in earlier:  # same hostname: the new pod must not share DNS with a dead one
                self._delete_pod(old.name, 0)
            if attempt and self._holds_for_servers(task.role):
                self._await_servers(pod)
            self._create_pod(body, pod)

        def failed(err: Exception, refused: bool) -> None:
            if isinstance(err, _NotSent):
                self._cancel([pod], str(err))
                return
            reason = str(self._create_error(err, "Pod", pod.name))
            with self._lock:
                pod.ended = True
            self._emit(Exited(pod.task, pod.attempt, time.time(), EXIT_NOT_STARTED, reason, final=refused))
            pod.done.set()

        creates.submit(pod, send, failed)

    def _holds_for_servers(self, role: str) -> bool:
        """Whether a restarted pod of ``role`` waits for the servers' addresses: the
        coordinator of a ParameterServerStrategy job (see :meth:`_await_servers`)."""
        return self.job.strategy == "parameter_server" and role == "chief"

    def _servers_without_address(self) -> list[str]:
        """The ps and worker tasks without a live pod that has an address (the pods of the
        attempts being stopped are ended by then: the supervisor stops before it restarts)."""
        with self._lock:
            addressed = {pod.task for pod in self._pods.values()
                         if not (pod.ended or pod.deleted) and (pod.last.get("status") or {}).get("podIP")}
        return [f"{role}-{index}" for role in ("ps", "worker") if role in self.job.roles
                for index in range(self.job.replicas(role)) if f"{role}-{index}" not in addressed]

    def _await_servers(self, pod: _Pod) -> None:
        """Hold a restarted ParameterServerStrategy chief's create until every ps and worker
        pod has an address, so that their DNS names are published before anything looks
        them up.

        The chief restarts with the ps and the workers (``Backend.addresses_vanish``);
        created together, the chief's TensorFlow could reach the workers, and they the ps,
        before the new pods had IPs. A name then resolves to nothing (the Service's
        endpoints drop an ended pod and list the new one only once it has an IP;
        ``publishNotReadyAddresses`` cannot publish an address that does not exist yet),
        and gRPC keeps a failed lookup for its resolver's backoff ("errors resolving
        ...-ps-0...: Temporary failure in name resolution"), while a connection refused by
        a task that has an address but does not serve yet is waited for by TensorFlow's
        connection retries. Bounded: after the unschedulable grace plus a create's timeout
        (the ps is then failed by its own observation anyway) the chief is created as
        before, with a note in ``kubernetes.log``. A stop meanwhile sends no create."""
        deadline = time.monotonic() + self.unschedulable_grace + REQUEST_TIMEOUT
        while True:
            missing = self._servers_without_address()
            if not missing:
                return
            if pod.halt.is_set() or self._closing.is_set():
                raise _NotSent("stopped before its pod was created")
            if time.monotonic() > deadline:
                self._note(f"creating {pod.name} although {', '.join(missing)} have no pod address yet")
                return
            pod.halt.wait(SERVER_ADDRESS_POLL)

    def _cancel(self, pods: list[_Pod], reason: str) -> None:
        for pod in pods:
            with self._lock:
                pod.create, pod.ended = CANCELLED, True
            pod.sent.set()
            self._finish(pod, PodView(False, True, EXIT_KILLED, reason))

    def _take_back(self, pods: list[_Pod]) -> list[_Pod]:
        """No create of ``pods`` is queued or in flight after this; returns the pods that
        exist (and must be deleted). The cancelled ones report Exited."""
        for pod in pods:
            pod.halt.set()
        if self._creates is None:
            return pods
        cancelled, existing = self._creates.take_back(pods)
        self._cancel(cancelled, "stopped before its pod was created")
        return existing

    def stop(self, names: list[str], grace: float) -> None:
        wanted = set(names)
        with self._lock:
            pods = [p for p in self._pods.values() if p.task in wanted and not p.ended]
        live = self._take_back(pods)
        if self._creates is not None:
            self._creates.each(lambda pod: self._delete_pod(pod.name, grace), live)
        deadline = time.monotonic() + grace + 15
        for pod in live:
            if not pod.done.wait(max(0.0, deadline - time.monotonic())):
                self._finish(pod, PodView(pod.started, True, -9, "no end confirmed by the API"))

    def _delete_pod(self, name: str, grace: float) -> None:
        with self._lock:
            pod = self._pods.get(name)
            if pod is not None:
                pod.ours = True
        try:
            request(
                self._api_client,
                "DELETE",
                path("Pod", self.namespace, name),
                query={"gracePeriodSeconds": int(grace)},
                timeout=REQUEST_TIMEOUT,
            )
        except Exception as err:
            if getattr(err, "status", None) != 404:
                self._note(f"deleting pod {name}: {api_error(err, 'delete')}")

    def close(self) -> None:
        """Delete every pod of the run, the ConfigMap, the Service and the NetworkPolicy;
        stop watching."""
        self._closing.set()
        if self._watch is not None:
            self._watch.interrupt()
        with self._lock:
            pods = [p for p in self._pods.values() if p.create in (QUEUED, CREATING)]
        self._take_back(pods)  # after this no create is queued or in flight: none outlives
        if self._creates is not None:  # the delete by label below
            self._creates.shutdown()
        if self._connected:
            created = [(obj["kind"], obj["metadata"]["name"]) for obj in self._created]
            for problem in delete_run_objects(self._api_client, self.namespace, self.selector, created):
                self._note(problem)
            self._created.clear()
        self._dismiss_reaper()
        for thread in self._threads[:2]:  # the watch and the ticker
            thread.join(timeout=2)

    # -- the reaper: cleans up if this process is killed before close() -------------------

    def _start_reaper(self) -> None:
        """Start reaper.py and tell it what to delete should this process die."""
        settings = None if self._own_client else reaper.config_of(self._api_client)
        header = {"namespace": self.namespace, "selector": self.selector, "config": settings}
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "tfdist.backends.k8s.reaper"],
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
        watchdog.dismiss(reaper, kill=True)

    # -- watching -----------------------------------------------------------------------

    def _tick_loop(self) -> None:
        """Re-judge unschedulable pods once a second (their grace runs out without an
        event); only those: 1,000 running pods judged every second cost more than a core's
        tenth."""
        while not self._closing.wait(1.0):
            with self._lock:
                pods = [p for p in self._pods.values() if p.unscheduled and not p.ended]
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
            ours = pod.ours or self._closing.is_set()
            pod.outside = pod.outside or (not ours and deleted_outside(pod.last) is not None)
            view = observe(
                pod.last,
                waited=time.monotonic() - pod.created,
                grace=self.unschedulable_grace,
                deleted=pod.deleted,
                ours=ours,
            )
            pod.unscheduled = view.unscheduled
            if view.started and not pod.started:
                pod.started = True
                self._emit(Started(pod.task, pod.attempt, time.time(), host=view.host))
                if self._creates is None:
                    self._start_logs(pod)
                else:  # once the creates are sent; see the module docstring
                    self._creates.after(lambda: self._start_logs(pod))
            if not view.ended:
                return
            pod.ended = True
        self._spawn(self._finish, f"end-{pod.name}", pod, view)

    def _start_logs(self, pod: _Pod) -> None:
        """Start following a started pod's log, once (deferred, or at once by _finish)."""
        with self._lock:
            if pod.logs is None and pod.started and not pod.done.is_set():
                pod.logs = self._spawn(self._follow_logs, f"logs-{pod.name}", pod)

    def _finish(self, pod: _Pod, view: PodView) -> None:
        """Report Exited after the last log line; delete a pod that would linger."""
        if pod.done.is_set():
            return
        self._start_logs(pod)  # its lines before Exited, even while creates are still sent
        if pod.logs is not None and pod.logs is not threading.current_thread():
            pod.logs.join(timeout=self.log_drain_timeout)
        self._after_outside_deletes(pod)
        if view.delete and not pod.deleted:
            self._delete_pod(pod.name, 0)
        with self._lock:
            if pod.done.is_set():
                return
            pod.ended = True
            code = EXIT_KILLED if view.exit_code is None else view.exit_code
            self._emit(Exited(pod.task, pod.attempt, time.time(), code, view.reason))
            pod.done.set()  # after the event: stop() returns only once it is queued

    def _after_outside_deletes(self, pod: _Pod) -> None:
        """Hold an ended pod's Exited until the pods someone else is deleting have reported
        theirs (bounded by their grace period): the kubelet's SIGTERM makes every worker of
        a MultiWorkerMirrored group save at one agreed step and exit 143 together, and the
        supervisor blames the first Exited it reads; it must be the deleted pod's."""
        if pod.outside:
            return
        deadline = time.monotonic() + self.job.stop_grace_seconds + self.log_drain_timeout + 5
        with self._lock:
            others = [p for p in self._pods.values() if p.outside and p is not pod]
        for other in others:
            other.done.wait(max(0.0, deadline - time.monotonic()))

    def _follow_logs(self, pod: _Pod) -> None:
        try:
            resp = self._open_log(pod)
            for line in iter_lines(resp.stream(amt=None, decode_content=False)):
                for event in line_events(pod.task, pod.attempt, time.time(), line):
                    self._emit(event)
            resp.release_conn()
        except Exception as err:
            if not (self._closing.is_set() or pod.deleted):
                self._note(f"log of {pod.name} ended early: {api_error(err, 'reading log')}")

    def _open_log(self, pod: _Pod) -> Any:
        """Send a pod's log request, at most :data:`LOG_OPENS` awaiting their answer at once:
        sent together (the deferred ones all go when the last create returns), each would
        open a connection of its own, a TLS handshake on both ends (1.6 s of this process's
        CPU at 1,000 pods on kwok, whose log requests end at once); a few at a time, those
        that end give their connection to the next. Past :data:`LOG_OPEN_WAIT` a request
        goes anyway, so one slow kubelet holds up no other pod's log."""
        turn = self._log_opens.acquire(timeout=LOG_OPEN_WAIT)
        try:
            query = {"container": CONTAINER, "follow": True}
            return call(self._api_client, "GET", path("Pod", self.namespace, pod.name, "log"), query=query)
        finally:
            if turn:
                self._log_opens.release()

    def _emit(self, event: Any) -> None:
        self.events.put(event)

    def _note(self, message: str) -> None:
        """Backend trouble that is no task's output: kept in ``<run_dir>/kubernetes.log``."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        try:
            if not self._noted:  # once: a run may note 1,000 log requests refused
                self.run_dir.mkdir(parents=True, exist_ok=True)
                self._noted = True
            with open(self.run_dir / "kubernetes.log", "a") as handle:
                handle.write(f"{stamp} {message}\n")
        except OSError:
            pass

"""`--backend kubernetes` (supervised pods) against a real control plane: the real API
server, scheduler and controllers; kwok plays the kubelet (kube/stages.yaml), so each
task's end is chosen by labels (:func:`fate`). No container runs, so no TensorFlow: a
pod's log is a file that kwok serves through the API server (:func:`_serve_log`).

Needs `make kube-up`; skips with the reason otherwise.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.backends.k8s.k8s_helpers import IMAGE, events_until, pod_env, start_all, tf_config
from tests.backends.k8s.kube_cluster import KUBECONFIG, Cluster, fate, wait_until
from tfdist.backends.base import BackendOptions, Exited, Started
from tfdist.backends.k8s import names
from tfdist.jobspec import load, model
from tfdist.jobspec.tfjob import CONTAINER

HANG = "1h"  # a server task (ps, or a worker of parameter-server training) that never ends by itself
NODES = {"kwok-node-0", "kwok-node-1"}


def _job(namespace: str, labels: dict[str, str], workdir: Path | None = None, **changes: Any) -> model.JobSpec:
    """The test job; with ``workdir``, shipped to the pods (kubernetes.ship_workdir's default)."""
    data: dict[str, Any] = {
        "name": "real-job",
        "strategy": "parameter_server",
        "command": ["python", "train.py"],
        "roles": {"chief": 1, "worker": 2, "ps": 1},
        "kubernetes": {"image": IMAGE, "namespace": namespace, "labels": labels},
    }
    if workdir is None:
        data["kubernetes"]["ship_workdir"] = False
    else:
        data["workdir"] = str(workdir)
    data.update(changes)
    return load.from_dict(data, "test")


def _servers_hang() -> dict[str, str]:
    labels: dict[str, str] = {}
    for task in ("ps-0", "worker-0", "worker-1"):
        labels[f"tfdist-after/{task}"] = HANG
    return labels


def _backend(kube: Cluster, job: model.JobSpec, tmp_path: Path) -> Any:
    from tfdist.backends.k8s import backend as k8s

    backend = k8s.KubernetesBackend(job, BackendOptions(kubernetes_client=kube.api_client))
    backend.attach(tmp_path / "run-1")
    return backend


def _leftovers(kube: Cluster, namespace: str) -> list[str]:
    selector = f"{names.LABEL_JOB}=real-job"
    found = []
    for path in (f"/api/v1/namespaces/{namespace}/pods", f"/api/v1/namespaces/{namespace}/services",
                 f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
                 f"/api/v1/namespaces/{namespace}/configmaps"):
        found += [f"{path.rsplit('/', 1)[1]}/{o['metadata']['name']}"
                  for o in kube.list(path, labelSelector=selector)]
    return found


def _all_gone(kube: Cluster, namespace: str, timeout: float = 30) -> None:
    wait_until(lambda: not _leftovers(kube, namespace), timeout, "everything of the run deleted")


def test_pods_get_the_env_and_tf_config_of_their_task(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    job = _job(namespace, {**_servers_hang(), "tfdist-after/chief-0": HANG})
    backend = _backend(kube, job, tmp_path)
    try:
        tasks = start_all(backend)
        started = events_until(backend, set(tasks), kind=Started, timeout=60)
        hosts = {e.task: e.host for e in started if isinstance(e, Started)}
        assert set(hosts.values()) <= NODES and len(hosts) == 4, hosts  # the real scheduler placed them
        pods = kube.list(f"/api/v1/namespaces/{namespace}/pods",
                         labelSelector=f"{names.LABEL_JOB}=real-job")
        assert len(pods) == 4
        # TF_CONFIG as the kubelet assembles it from the run's ConfigMap (one per run)
        (config_map,) = kube.list(f"/api/v1/namespaces/{namespace}/configmaps",
                                  labelSelector=f"{names.LABEL_JOB}=real-job")
        cluster_spec = None
        for pod in pods:
            meta, pod_spec = pod["metadata"], pod["spec"]
            task = meta["labels"][names.LABEL_TASK]
            container = next(c for c in pod_spec["containers"] if c["name"] == CONTAINER)
            env = pod_env(container, meta.get("annotations"), meta["labels"], [config_map])
            assert env.pop("TFDIST_CLUSTER") == config_map["data"]["cluster"]
            assert env == {**tasks[task].env, "TFDIST_RUN_DIR": names.pod_run_dir(job)}  # as planned
            config = tf_config(env)
            role, index = task.rsplit("-", 1)
            assert config["task"] == {"type": role, "index": int(index)}, (task, config)
            cluster_spec = cluster_spec or config["cluster"]
            assert config["cluster"] == cluster_spec  # one cluster for every task
            # the name TF_CONFIG gives this task is the pod's DNS name: hostname.subdomain
            (address,) = [a for a in config["cluster"][role] if a.startswith(pod_spec["hostname"] + ".")]
            assert address.split(":")[0] == f"{pod_spec['hostname']}.{pod_spec['subdomain']}"
            assert pod["status"]["phase"] == "Running"
        services = kube.list(f"/api/v1/namespaces/{namespace}/services")
        (svc,) = [s for s in services if s["metadata"]["name"] == pods[0]["spec"]["subdomain"]]
        assert svc["spec"]["clusterIP"] == "None"  # headless: one DNS name per pod
        backend.stop(list(tasks), grace=1)
        events_until(backend, set(tasks) - {e.task for e in started if isinstance(e, Exited)}, timeout=60)
    finally:
        backend.close()
    _all_gone(kube, namespace)


def test_exit_codes_come_from_the_pods(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    labels = {**fate("worker-0", 3), **fate("worker-1", 0), **fate("chief-0", 0), "tfdist-after/ps-0": HANG}
    backend = _backend(kube, _job(namespace, labels), tmp_path)
    try:
        start_all(backend)
        events = events_until(backend, {"chief-0", "worker-0", "worker-1"}, timeout=60)
        codes = {e.task: e.exit_code for e in events if isinstance(e, Exited)}
        assert codes == {"chief-0": 0, "worker-0": 3, "worker-1": 0}, events
        backend.stop(["ps-0"], grace=1)
        (stopped,) = [e for e in events_until(backend, {"ps-0"}, timeout=60) if isinstance(e, Exited)]
        assert stopped.exit_code != 0
    finally:
        backend.close()
    _all_gone(kube, namespace)


@pytest.mark.parametrize(
    ("played", "code", "reason", "started"),
    [
        ("1", 1, None, True),
        ("oom", 137, "OOMKilled", True),
        ("image", 127, "ErrImagePull: pull access denied for registry.example/", False),
        ("crashloop", 2, "CrashLoopBackOff: back-off 10s", True),
        ("evicted", 137, "Evicted: The node was low on resource: memory.", True),
    ],
)
def test_failures_are_reported_with_the_reason(
    kube: Cluster, namespace: str, tmp_path: Path, played: str, code: int, reason: str | None, started: bool
) -> None:
    job = _job(namespace, fate("worker-0", played), strategy="multi_worker_mirrored", roles={"worker": 1})
    backend = _backend(kube, job, tmp_path)
    try:
        start_all(backend)
        events = events_until(backend, {"worker-0"}, timeout=60)
        (exited,) = [e for e in events if isinstance(e, Exited)]
        assert exited.exit_code == code, events
        if reason is None:
            assert exited.reason is None
        else:
            assert exited.reason is not None and exited.reason.startswith(reason), exited.reason
        assert any(isinstance(e, Started) for e in events) == started, events
        if played in ("image", "crashloop"):  # a pod that would linger (or start late) is deleted
            wait_until(lambda: not kube.list(f"/api/v1/namespaces/{namespace}/pods"), 30, "the pod deleted")
    finally:
        backend.close()
    _all_gone(kube, namespace)


def test_an_unschedulable_pod_fails_after_the_grace(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    job = load.from_dict({"name": "real-job", "strategy": "one_device", "command": ["python", "t.py"],
                          "roles": {"chief": 1},
                          "kubernetes": {"image": IMAGE, "namespace": namespace,
                                         "node_selector": {"pool": "no-such-pool"},
                                         "unschedulable_timeout_seconds": 2, "ship_workdir": False}}, "test")
    backend = _backend(kube, job, tmp_path)
    try:
        start_all(backend)
        (exited,) = [e for e in events_until(backend, {"chief-0"}, timeout=60) if isinstance(e, Exited)]
        assert exited.exit_code == 127
        nodes = len(kube.list("/api/v1/nodes"))  # kwok's two, and kube/node.sh's real one when it runs
        assert "Unschedulable" in exited.reason and f"0/{nodes} nodes are available" in exited.reason, exited.reason
    finally:
        backend.close()
    _all_gone(kube, namespace)


def test_a_supervised_run_restarts_by_policy_and_stops_the_ps(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    from tfdist import api

    labels = {**_servers_hang(), **fate("worker-1", 1, attempt=0, after="1s"), **fate("chief-0", 0, after="6s")}
    job = _job(namespace, labels, restart={"policy": "on-failure", "max_restarts": 2})
    result = api.run(job, backend="kubernetes", run_dir=tmp_path / "run", quiet=True,
                     options=BackendOptions(kubernetes_client=kube.api_client))
    assert result.exit_code == 0, result.to_dict()
    assert result.restarts_used == 1, result.to_dict()
    tasks = {t.name: t for t in result.tasks}
    assert tasks["worker-1"].restarts == 1 and tasks["chief-0"].exit_code == 0, tasks
    assert tasks["ps-0"].exit_code != 0  # stopped by tfdist at success, not ended by itself
    _all_gone(kube, namespace)


def _cli(*args: str, timeout: float = 180, **kwargs: Any) -> Any:
    env = {"KUBECONFIG": str(KUBECONFIG), "PATH": "/usr/bin:/bin"}
    import os

    env.update({k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "TFDIST_HOME", "HOME")})
    return subprocess.run([sys.executable, "-m", "tfdist.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)


def test_cli_run_reports_the_exit_code_and_cleans_up(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    job = _job(namespace, {**_servers_hang(), **fate("chief-0", 2)})
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(job.to_yaml())
    proc = _cli("run", str(jobfile), "--backend", "kubernetes", "--runs-dir", str(tmp_path / "runs"),
                cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "exit code 2" in proc.stdout + proc.stderr or "exit 2" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    _all_gone(kube, namespace)


def test_cli_run_reports_an_evicted_task_with_the_reason(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    """kwok evicts worker-1's pod as a kubelet reports it (phase Failed, reason Evicted, the
    container's status lost): the run fails, naming the eviction and its message."""
    job = _job(namespace, {**_servers_hang(), **fate("worker-1", "evicted", after="1s"),
                           "tfdist-after/chief-0": HANG}, restart={"policy": "never"})
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(job.to_yaml())
    runs = tmp_path / "runs"
    proc = _cli("run", str(jobfile), "--backend", "kubernetes", "--runs-dir", str(runs), cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Evicted: The node was low on resource: memory." in out, out
    (summary_file,) = runs.glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    cause = summary["root_cause"]
    assert (summary["state"], cause["task"], cause["exit_code"]) == ("failed", "worker-1", 137), cause
    assert cause["description"].startswith("Evicted: The node was low on resource"), cause
    _all_gone(kube, namespace)


def _serve_log(kube: Cluster, namespace: str, pod: str, path: Path, lines: list[tuple[str, str]]) -> None:
    """Make kwok serve ``lines`` ((stream, text)) as ``pod``'s log, through the API server's
    pods/log and kwok's kubelet-like server (a file in the CRI log format, a Logs object)."""
    path.write_text("".join(f"2026-01-01T00:00:0{i}.000000000Z {stream} F {text}\n"
                            for i, (stream, text) in enumerate(lines)))
    kube.call("POST", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{namespace}/logs", {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod},
        "spec": {"logs": [{"containers": [CONTAINER], "logsFile": str(path)}]}})


def test_pod_logs_are_streamed_into_the_run_directory(
    kube: Cluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.client.exceptions import ApiException

    from tfdist import api
    from tfdist.backends.k8s import backend as k8s
    from tfdist.backends.k8s import supervised

    try:
        kube.call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/logs.kwok.x-k8s.io")
    except ApiException:
        pytest.skip("kwok serves no pod logs: its Logs CRD is not installed (kube/kube.sh found no kwok "
                    "module source in the Go module cache); restart with: make kube-down kube-up")
    # kwok cannot tell a log's end (it has no container): its follow stream stays open, so
    # tfdist waits out the drain timeout after each pod's end; shortened here
    monkeypatch.setattr(k8s.KubernetesBackend, "log_drain_timeout", 1.0)
    job = _job(namespace, {**fate("chief-0", 0, after="3s"), **fate("worker-0", 0, after="3s")},
               strategy="multi_worker_mirrored", roles={"chief": 1, "worker": 1})
    for task in ("chief-0", "worker-0"):
        _serve_log(kube, namespace, supervised.pod_name(job, task, 0), tmp_path / f"{task}.cri.log",
                   [("stdout", f"hello from {task}"), ("stderr", f"a warning from {task}"),
                    ("stdout", 'TFDIST_PROGRESS {"epoch": 1, "loss": 0.5}')])
    result = api.run(job, backend="kubernetes", run_dir=tmp_path / "run", quiet=True,
                     options=BackendOptions(kubernetes_client=kube.api_client))
    assert result.exit_code == 0, result.to_dict()
    for task in ("chief-0", "worker-0"):
        (log,) = (tmp_path / "run" / "logs").glob(f"{task}*")
        text = log.read_text()
        assert f"hello from {task}" in text and f"a warning from {task}" in text, text
    progress = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    assert {p["task"] for p in progress} == {"chief-0", "worker-0"}, progress
    _all_gone(kube, namespace)


def test_a_killed_tfdist_leaves_nothing_behind(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    """SIGKILL the CLI mid-run: its reaper deletes the pods, the ConfigMaps (the cluster map
    and the shipped workdir), the Service and the NetworkPolicy."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "train.py").write_text("print('trained')\n")
    job = _job(namespace, {**_servers_hang(), "tfdist-after/chief-0": HANG}, workdir)
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(job.to_yaml())
    import os

    env = dict(os.environ, KUBECONFIG=str(KUBECONFIG))
    proc = subprocess.Popen([sys.executable, "-m", "tfdist.cli", "run", "-q", str(jobfile), "--backend",
                             "kubernetes", "--runs-dir", str(tmp_path / "runs")],
                            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: len(_leftovers(kube, namespace)) == 8, 60,
                   "4 pods, 2 ConfigMaps, a Service and a NetworkPolicy")
        assert sum(name.endswith("-workdir") for name in _leftovers(kube, namespace)) == 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        _all_gone(kube, namespace)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_submit_then_stop(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    job = _job(namespace, {**_servers_hang(), "tfdist-after/chief-0": HANG})
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(job.to_yaml())
    sub = _cli("submit", str(jobfile), "--backend", "kubernetes", "--runs-dir", str(tmp_path / "runs"),
               cwd=tmp_path)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().splitlines()[-1]
    wait_until(lambda: len(_leftovers(kube, namespace)) == 7, 60, "the run's pods")
    stop = _cli("stop", job_id, cwd=tmp_path)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    _all_gone(kube, namespace)
    status = json.loads(_cli("status", job_id, "--json", cwd=tmp_path).stdout)
    assert status["state"] == "stopped"


# -- many pods: creates go out several at a time (a pool); stop and kill during creation ----

MANY = 50


def _many(namespace: str, **changes: Any) -> model.JobSpec:
    return _job(namespace, {"tfdist-after/all": "2s"}, strategy="none", success="all-workers",
                roles={"worker": MANY}, **changes)


class _PodWatch:
    """Every pod event of a namespace, from a watch started before tfdist runs, so that a
    pod created and deleted between two lists is still seen."""

    def __init__(self, kube: Cluster, namespace: str) -> None:
        import threading

        from kubernetes import client

        self.core = client.CoreV1Api(kube.api_client)
        self.namespace = namespace
        self.events: list[tuple[str, str]] = []  # (type, pod name)
        self.version = kube.call("GET", f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from tfdist.backends.k8s.pods import iter_lines

        while not self.stopping.is_set():
            resp = self.core.list_namespaced_pod(self.namespace, watch=True, resource_version=self.version,
                                                 timeout_seconds=2, _preload_content=False)
            for line in iter_lines(resp.stream(amt=None, decode_content=False)):
                if line.strip():
                    event = json.loads(line)
                    self.version = event["object"]["metadata"]["resourceVersion"]
                    self.events.append((event["type"], event["object"]["metadata"]["name"]))
            resp.release_conn()

    def created(self) -> set[str]:
        return {name for kind, name in self.events if kind == "ADDED"}

    def deleted(self) -> set[str]:
        return {name for kind, name in self.events if kind == "DELETED"}


def test_many_pods_are_all_created_and_all_deleted(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    from tfdist import api

    watch = _PodWatch(kube, namespace)
    result = api.run(_many(namespace), backend="kubernetes", run_dir=tmp_path / "run", quiet=True,
                     options=BackendOptions(kubernetes_client=kube.api_client))
    assert result.exit_code == 0, result.to_dict()
    assert {t.name: t.exit_code for t in result.tasks} == {f"worker-{i}": 0 for i in range(MANY)}
    _all_gone(kube, namespace)
    wait_until(lambda: watch.deleted() >= watch.created(), 30, "every pod's deletion seen")
    watch.stopping.set()
    assert len(watch.created()) == MANY, sorted(watch.created())  # one pod per task, none twice


@pytest.mark.parametrize("how", ["stop", "close"])
def test_stop_or_close_during_creation_leaves_no_pod(how: str, kube: Cluster, namespace: str,
                                                     tmp_path: Path) -> None:
    """stop() or close() while creates are queued and in flight: the queued are never sent,
    the sent are deleted once they return; after stop() every task reports its end."""
    watch = _PodWatch(kube, namespace)
    job = _job(namespace, {"tfdist-after/all": HANG}, strategy="none", roles={"worker": MANY})
    backend = _backend(kube, job, tmp_path)
    never_sent: set[str] = set()
    try:
        tasks = start_all(backend)  # only queues the creates: they go out 8 at a time
        if how == "stop":
            backend.stop(list(tasks), grace=0)
            exits = [e for e in events_until(backend, set(tasks), timeout=60) if isinstance(e, Exited)]
            assert sorted(e.task for e in exits) == sorted(tasks)  # one end per task
            never_sent = {e.task for e in exits if e.reason == "stopped before its pod was created"}
    finally:
        backend.close()
    # no create outlives close(): each request has returned (or was never sent), so each pod
    # it made is already stored and in the list below; none can land later
    assert backend._creates is not None and backend._creates.pending == 0
    _all_gone(kube, namespace)
    wait_until(lambda: watch.deleted() >= watch.created(), 30, "every created pod's deletion seen")
    watch.stopping.set()
    created_tasks = {name.removeprefix("real-job-").rsplit("-a", 1)[0] for name in watch.created()}
    assert not created_tasks & never_sent, created_tasks & never_sent  # cancelled means never sent
    if how == "stop":
        assert len(created_tasks) + len(never_sent) == MANY


def _reaper_of(pid: int) -> int | None:
    """The pid of the reaper process (tfdist.backends.k8s.reaper) that tfdist ``pid`` started."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and b"tfdist.backends.k8s.reaper" in command:
            return int(entry.name)
    return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped by its new parent, does not)."""
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_tfdist_killed_while_creating_leaves_nothing_behind(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    """SIGKILL while pod creates are in flight leaves nothing. (The reaper deletes by label
    twice, for a create that lands after its first pass; this test does not force that
    race, it checks the outcome.)"""
    import os

    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(_job(namespace, {"tfdist-after/all": HANG}, strategy="none",
                            roles={"worker": MANY}).to_yaml())
    env = dict(os.environ, KUBECONFIG=str(KUBECONFIG))
    proc = subprocess.Popen([sys.executable, "-m", "tfdist.cli", "run", "-q", str(jobfile), "--backend",
                             "kubernetes", "--runs-dir", str(tmp_path / "runs")],
                            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        reaper = wait_until(lambda: _reaper_of(proc.pid), 60, "tfdist's reaper")
        wait_until(lambda: len(_leftovers(kube, namespace)) > 5, 60, "the first pods")  # + ConfigMap, Service, policy
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # the reaper exits after its second pass by label, the one for creates that were in
        # flight when tfdist died: after that nothing deletes, so a pod created late would stay
        wait_until(lambda: not _alive(reaper), 60, "the reaper's exit after its passes")
        _all_gone(kube, namespace)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_workdir_over_a_config_map_is_refused_in_one_line_before_anything(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    """A workdir whose archive would not fit in a ConfigMap (1 MiB): exit 2, one line naming
    kubernetes.ship_workdir and the ways out, and nothing made, neither on the cluster nor a
    run directory; with ship_workdir false the same job starts."""
    import os

    workdir = tmp_path / "work"
    (workdir / "data").mkdir(parents=True)
    (workdir / "train.py").write_text("print('trained')\n")
    (workdir / "data" / "noise.bin").write_bytes(os.urandom(1_200_000))  # does not compress
    job = _job(namespace, fate("chief-0", 0), workdir, strategy="one_device", roles={"chief": 1})
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(job.to_yaml())
    env = dict(os.environ, KUBECONFIG=str(KUBECONFIG))
    args = [sys.executable, "-m", "tfdist.cli", "run", str(jobfile), "--backend", "kubernetes",
            "--runs-dir", str(tmp_path / "runs")]
    proc = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "kubernetes.ship_workdir:" in lines[0] and "over the 1 MiB a Kubernetes ConfigMap holds" in lines[0]
    assert "set kubernetes.ship_workdir: false" in lines[0] and "kubernetes.image" in lines[0], lines[0]
    assert not _leftovers(kube, namespace)
    assert not list((tmp_path / "runs").glob("*")), "a run directory was made"
    # the same job without shipping runs (its chief's fate under kwok: exit 0)
    proc = subprocess.run([*args, "-q", "--set", "kubernetes.ship_workdir=false"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _all_gone(kube, namespace)

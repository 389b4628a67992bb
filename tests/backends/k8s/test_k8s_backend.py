"""KubernetesBackend against the fake API server: the real client, real HTTP, fake pods.

No Kubernetes cluster runs here; tests/backends/k8s/fake_apiserver.py plays pod lifecycles with
their log output. The real control plane (test_real_*.py) covers scheduling, every pod
failure reason, restarts, clean-up and RBAC; what stays here needs the fake (see its
docstring) or is a quick check of the same paths without `make kube-up`.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes client is an optional dependency")

from tests.backends.k8s.fake_apiserver import PROGRESS, FakeAPIServer  # noqa: E402
from tests.backends.k8s.k8s_helpers import events_until, start_all  # noqa: E402
from tfdist import cluster
from tfdist.backends.base import BackendOptions, Exited, Output, Progress, Started, progress_data  # noqa: E402
from tfdist.backends.k8s import backend as k8s  # noqa: E402
from tfdist.backends.k8s import client, names, pods  # noqa: E402
from tfdist.errors import BackendError, SpecError  # noqa: E402
from tfdist.jobspec import labels, load  # noqa: E402
from tfdist.jobspec.tfjob import CONTAINER  # noqa: E402
from tfdist.states import describe_memory_kill  # noqa: E402

JOB = {
    "name": "fake-job",
    "strategy": "parameter_server",
    "command": ["python", "train.py"],
    "roles": {"chief": 1, "worker": 2, "ps": 1},
    "kubernetes": {"image": "registry.example/train:1", "namespace": "ml", "ship_workdir": False},
}


@pytest.fixture
def server():
    with FakeAPIServer() as srv:
        yield srv


def _backend(server: FakeAPIServer, tmp_path: Path, **changes: Any) -> k8s.KubernetesBackend:
    job = load.from_dict({**JOB, **changes}, "test")
    backend = k8s.KubernetesBackend(job, BackendOptions(kubernetes_client=server.api_client()))
    backend.attach(tmp_path / "run-1")
    return backend


def _of(events: list[Any], task: str, kind: type) -> list[Any]:
    return [e for e in events if e.task == task and isinstance(e, kind)]


def test_reserve_creates_config_map_service_and_policy_and_gives_dns_addresses(server, tmp_path) -> None:
    backend = _backend(server, tmp_path)
    try:
        addresses = backend.reserve(cluster.task_ids(backend.job))
        assert addresses == {
            "chief-0": "fake-job-chief-0.fake-job:2222",
            "worker-0": "fake-job-worker-0.fake-job:2222",
            "worker-1": "fake-job-worker-1.fake-job:2222",
            "ps-0": "fake-job-ps-0.fake-job:2222",
        }
        assert set(server.cluster.others) == {
            ("configmaps", "run-1-cluster"),
            ("services", "fake-job"),
            ("networkpolicies", "fake-job-grpc"),
        }
        members = json.loads(server.cluster.others[("configmaps", "run-1-cluster")]["data"]["cluster"])
        assert members == cluster.cluster_map(backend.job, addresses)
        created = [path for method, path in server.cluster.requests if method == "POST"]
        assert created[0].endswith("/configmaps"), "the ConfigMap exists before anything refers to it"
    finally:
        backend.close()
    assert server.cluster.others == {}
    assert ("DELETE", "/api/v1/namespaces/ml/configmaps") in server.cluster.requests  # by label


def test_a_config_map_that_cannot_be_created_ends_the_run_with_one_line(server, tmp_path) -> None:
    """A failure to create the ConfigMap (here: the name is taken) is one line, and since it
    is created first, no Service, NetworkPolicy or pod was made; close() spares the
    unlabelled ConfigMap that is not the run's."""
    server.cluster.others[("configmaps", "run-1-cluster")] = {"metadata": {"name": "run-1-cluster"}}
    backend = _backend(server, tmp_path)
    with pytest.raises(BackendError, match="a ConfigMap named run-1-cluster already exists") as err:
        backend.reserve(cluster.task_ids(backend.job))
    assert "\n" not in str(err.value)
    backend.close()
    assert list(server.cluster.others) == [("configmaps", "run-1-cluster")] and not server.cluster.pods


def test_a_successful_run_reports_started_output_progress_exited(server, tmp_path) -> None:
    server.cluster.scripts["ps-0"] = "hang"
    backend = _backend(server, tmp_path)
    try:
        start_all(backend)
        events = events_until(backend, {"chief-0", "worker-0", "worker-1"}, timeout=10)
        for task in ("chief-0", "worker-0", "worker-1"):
            kinds = [type(e) for e in events if e.task == task]
            assert kinds[0] is Started and kinds[-1] is Exited, kinds
            lines = [e.line for e in _of(events, task, Output)]
            assert lines == [f"fake-job-{task}-a0 starting", "done"]
            (progress,) = _of(events, task, Progress)
            assert progress.data == {"epoch": 1, "loss": 0.5}
            (exited,) = _of(events, task, Exited)
            assert (exited.exit_code, exited.reason) == (0, None)
            assert _of(events, task, Started)[0].host == "node-1"
        # the ps never ends by itself: the supervisor stops it, the backend deletes the pod
        backend.stop(["ps-0"], grace=5)
        (exited,) = [e for e in _drain(backend) if isinstance(e, Exited)]
        assert (exited.task, exited.exit_code) == ("ps-0", 143)
        assert ("DELETE", "/api/v1/namespaces/ml/pods/fake-job-ps-0-a0") in server.cluster.requests
    finally:
        backend.close()
    assert _all_gone(server)
    gets = [r for r in server.cluster.requests if r[0] == "GET" and r[1].endswith("/pods")]
    assert len(gets) <= 3, "pods are watched, not polled"


def _all_gone(server: FakeAPIServer, timeout: float = 3) -> bool:
    """Deleting is asynchronous (grace periods), on the fake as on a real cluster."""
    deadline = time.monotonic() + timeout
    while server.cluster.pods or server.cluster.others:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _drain(backend: k8s.KubernetesBackend) -> list[Any]:
    found = []
    while True:
        try:
            found.append(backend.events.get_nowait())
        except queue.Empty:
            return found


def test_a_failure_is_reported_after_the_last_lines_of_its_log(server, tmp_path) -> None:
    """The one thing kwok cannot play: a log stream that ends when the container exits.
    (Each failure reason is tested against the real control plane: test_real_backend.py.)"""
    server.cluster.scripts["worker-1"] = "fail"
    backend = _backend(server, tmp_path)
    try:
        start_all(backend)
        events = events_until(backend, {"worker-1"}, timeout=10)
        (exited,) = _of(events, "worker-1", Exited)
        assert (exited.exit_code, exited.reason) == (1, None)
        assert _of(events, "worker-1", Started)
        lines = [e.line for e in _of(events, "worker-1", Output)]
        assert lines[-1] == "ValueError: boom"
        assert events.index(exited) > events.index(_of(events, "worker-1", Output)[-1])
    finally:
        backend.close()


def test_a_new_attempt_gets_a_new_pod_with_the_same_hostname(server, tmp_path) -> None:
    server.cluster.scripts["worker-0"] = ["fail", "ok"]
    backend = _backend(server, tmp_path, roles={"worker": 1}, strategy="multi_worker_mirrored")
    try:
        addresses = backend.reserve(cluster.task_ids(backend.job))
        (task,) = cluster.plan(backend.job, addresses, run_dir="/local")
        backend.start(task, 0)
        first = events_until(backend, {"worker-0"}, timeout=10)
        assert _of(first, "worker-0", Exited)[0].exit_code == 1
        backend.start(task, 1)
        second = events_until(backend, {"worker-0"}, timeout=10)
        (exited,) = _of(second, "worker-0", Exited)
        assert (exited.attempt, exited.exit_code) == (1, 0)
        pod = [obj for _, _, obj in server.cluster.history if obj["metadata"]["name"].endswith("-a1")][-1]
        assert pod["metadata"]["name"] == "fake-job-worker-0-a1"
        assert pod["spec"]["hostname"] == "fake-job-worker-0"
        _wait_for(lambda: "fake-job-worker-0-a0" in server.cluster.deleted_pods, "a0 deleted", 5)
    finally:
        backend.close()


def test_a_pod_that_cannot_be_created_is_a_failed_attempt(server, tmp_path) -> None:
    backend = _backend(server, tmp_path, roles={"worker": 1}, strategy="multi_worker_mirrored")
    try:
        addresses = backend.reserve(cluster.task_ids(backend.job))
        (task,) = cluster.plan(backend.job, addresses, run_dir="/local")
        server.cluster.pods["fake-job-worker-0-a0"] = {"metadata": {"name": "x"}}
        backend.start(task, 0)  # the create is sent by the pool: Exited comes as an event
        (exited,) = _of(events_until(backend, {"worker-0"}, timeout=10), "worker-0", Exited)
        assert exited.exit_code == 127 and "already exists" in (exited.reason or "")
        assert exited.final  # a client error (4xx): the same create would fail again
    finally:
        server.cluster.pods.clear()
        backend.close()


def test_a_shed_create_is_sent_again_after_its_retry_after(server, tmp_path) -> None:
    """429 (the server's priority and fairness had no room): not a failure, sent again."""
    backend = _backend(server, tmp_path, roles={"worker": 1}, strategy="multi_worker_mirrored")
    try:
        addresses = backend.reserve(cluster.task_ids(backend.job))
        (task,) = cluster.plan(backend.job, addresses, run_dir="/local")
        server.cluster.throttle = 2
        backend.start(task, 0)
        (exited,) = _of(events_until(backend, {"worker-0"}, timeout=10), "worker-0", Exited)
        assert exited.exit_code == 0, exited
        assert server.cluster.throttle == 0  # both 429s were answered before the create went through
    finally:
        backend.close()


def test_retry_after_and_refused_read_the_status() -> None:
    from tfdist.backends.k8s.client import retry_after
    from tfdist.backends.k8s.creates import refused

    class Err(Exception):
        def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
            self.status, self.headers = status, headers

    assert retry_after(Err(429, {"Retry-After": "3"})) == 3.0
    assert retry_after(Err(429)) == 1.0 and retry_after(Err(429, {"Retry-After": "soon"})) == 1.0
    assert retry_after(Err(403)) is None and retry_after(Err(500)) is None
    assert refused(Err(403)) and refused(Err(422)) and refused(Err(409))
    assert not refused(Err(429)) and not refused(Err(500)) and not refused(ValueError())


def test_work_after_the_creates_waits_for_the_last_one() -> None:
    """The backend defers log requests with Creates.after: run once none is queued or sent."""
    import threading

    from tfdist.backends.k8s.creates import CREATED, CREATING, Creates

    class Item:
        def __init__(self) -> None:
            self.create, self.sent = "queued", threading.Event()

    lock, release, ran = threading.RLock(), threading.Event(), []
    creates = Creates(lock, threading.Event())
    try:
        creates.after(lambda: ran.append("idle"))  # nothing pending: at once
        assert ran == ["idle"]
        items = [Item(), Item()]
        for item in items:
            creates.submit(item, lambda: release.wait(10), lambda err, refused: None)
        creates.after(lambda: ran.append("after"))
        # a create in flight (CREATING, held in send until release) cannot have finished:
        # work run now would have run too early (not a sleep that a slow machine outlasts)
        deadline = time.monotonic() + 10
        while items[0].create != CREATING and time.monotonic() < deadline:
            time.sleep(0.01)
        assert items[0].create == CREATING and items[1].create in ("queued", CREATING)
        assert ran == ["idle"]  # both creates still queued or in flight
        release.set()
        for item in items:
            assert item.sent.wait(10)
        deadline = time.monotonic() + 5
        while ran != ["idle", "after"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ran == ["idle", "after"] and all(i.create == CREATED for i in items)
    finally:
        release.set()
        creates.shutdown()


def test_a_name_clash_with_a_running_job_is_a_clear_error(server, tmp_path) -> None:
    server.cluster.others[("services", "fake-job")] = {"metadata": {"name": "fake-job"}}
    backend = _backend(server, tmp_path)
    with pytest.raises(BackendError, match="Service named fake-job already exists"):
        backend.reserve(cluster.task_ids(backend.job))
    backend.close()


@pytest.mark.parametrize("content", [None, "", "garbage: [\n", "apiVersion: v1\nkind: Config\n"])
def test_no_readable_cluster_configuration_is_bad_input_in_check(tmp_path, monkeypatch, content) -> None:
    """Missing, a directory, malformed YAML, no current context: one line naming the file,
    exit 2, raised by check() (before the run directory is made), not at the first request."""
    config = tmp_path / "kubeconfig"
    if content is None:
        config.mkdir()
    elif content:
        config.write_text(content)
    monkeypatch.setenv("KUBECONFIG", str(config))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    backend = k8s.KubernetesBackend(load.from_dict(JOB, "test"))
    with pytest.raises(SpecError, match=f"cannot read the kubeconfig {config}") as err:
        backend.check()
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    with pytest.raises(SpecError, match=f"cannot read the kubeconfig {config}"):
        client.load_api_client()  # the reaper's way in says the same


def test_a_ps_job_without_a_shared_volume_is_warned_after_every_check(server, tmp_path, capsys) -> None:
    """Under parameter_server the ps tasks write their share of the chief's saves into the
    path it names, in their own pod (real pods failed with NOT_FOUND ckpt-1_temp): without
    kubernetes.model_volume_claim, preflight (run and submit) says so in one line on stderr
    once every check has passed; not with a claim, nor for a strategy without ps; and a job
    refused for something else gets only its one-line refusal."""
    from tfdist.jobs.preflight import preflight

    def check(**changes: Any) -> str:
        job = load.from_dict({**JOB, **changes}, "test")
        _, backend = preflight(job, "kubernetes", BackendOptions(kubernetes_client=server.api_client()),
                               record=False, runs_root=False)
        backend.close()
        return capsys.readouterr().err

    err = check()
    assert err.startswith("tfdist: warning: kubernetes.model_volume_claim: not set") and err.count("\n") == 1, err
    assert "NOT_FOUND" in err
    assert check(kubernetes={**JOB["kubernetes"], "model_volume_claim": "model"}) == ""
    assert check(strategy="multi_worker_mirrored", roles={"chief": 1, "worker": 2}) == ""
    (tmp_path / "clicks").mkdir()
    (tmp_path / "clicks" / "part-0").write_text("x")
    with pytest.raises(SpecError, match="the kubernetes backend takes mode: stream"):
        check(workdir=str(tmp_path), data={"train": {"uris": ["clicks"], "shard": "none"}})  # staged: refused
    assert capsys.readouterr().err == ""


def test_render_warns_a_ps_job_without_a_shared_volume_after_the_manifests(tmp_path) -> None:
    """`tfdist render` writes the manifests whole on stdout (for kubectl) and the warning on stderr."""
    import subprocess

    (tmp_path / "job.yaml").write_text(json.dumps(JOB))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3] / "src")}
    done = subprocess.run([sys.executable, "-m", "tfdist.cli", "render", "job.yaml", "--as", "jobset"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "kind: JobSet" in done.stdout and "warning" not in done.stdout
    assert done.stderr.startswith("tfdist: warning: kubernetes.model_volume_claim: not set"), done.stderr


# -- the whole path: supervisor and CLI ---------------------------------------------


def test_supervised_run_succeeds_and_stops_the_ps(server, tmp_path) -> None:
    from tfdist import api

    # As in real parameter-server training, ps and workers are servers that never end by
    # themselves (a worker that did end first would be an unexpected exit: a failure).
    for task in ("ps-0", "worker-0", "worker-1"):
        server.cluster.scripts[task] = "hang"
    job = load.from_dict(JOB, "test")
    result = api.run(
        job,
        backend="kubernetes",
        run_dir=tmp_path / "run",
        quiet=True,
        options=BackendOptions(kubernetes_client=server.api_client()),
    )
    assert result.exit_code == 0, result
    for pod in ("ps-0", "worker-0", "worker-1"):
        assert ("DELETE", f"/api/v1/namespaces/ml/pods/fake-job-{pod}-a0") in server.cluster.requests
    assert _all_gone(server)
    # the chief's output is in the run directory, though its pod is gone
    assert "done" in (tmp_path / "run" / "logs" / "chief-0.log").read_text()


def _cli_files(server: FakeAPIServer, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The job file and the environment for running the tfdist CLI against the fake server
    (a kubeconfig pointing at it, a job store of the test's own)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(server.kubeconfig())
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(load.from_dict(JOB, "test").to_yaml())
    env = {"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "TFDIST_HOME": str(tmp_path / "home")}
    if "PYTHONPATH" in os.environ:  # the sources under test, not an installed tfdist
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return jobfile, env


def test_cli_run_with_kubeconfig(server, tmp_path) -> None:
    import subprocess

    for task in ("ps-0", "worker-0", "worker-1"):
        server.cluster.scripts[task] = "hang"  # parameter-server servers end when stopped
    jobfile, env = _cli_files(server, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "tfdist.cli", "run", str(jobfile), "--backend", "kubernetes"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "done" in proc.stdout + proc.stderr
    assert _all_gone(server)
    # the run is in the job store like a local one
    listed = subprocess.run([sys.executable, "-m", "tfdist.cli", "list", "--json"], capture_output=True,
                            text=True, timeout=60, env=env, cwd=tmp_path)
    (job,) = json.loads(listed.stdout)
    assert (job["backend"], job["state"], job["task_count"]) == ("kubernetes", "succeeded", 4)


def test_submit_and_stop_a_kubernetes_job(server, tmp_path) -> None:
    """Detached: tfdist stop ends the supervisor, which deletes every pod of the run."""
    import subprocess

    for task in ("chief-0", "ps-0", "worker-0", "worker-1"):
        server.cluster.scripts[task] = "hang"
    jobfile, env = _cli_files(server, tmp_path)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tfdist.cli", *args], capture_output=True, text=True,
                              timeout=120, env=env, cwd=tmp_path)

    sub = cli("submit", str(jobfile), "--backend", "kubernetes", "--runs-dir", str(tmp_path / "runs"))
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().splitlines()[-1]
    _wait_for(lambda: len(server.cluster.pods) == 4, "4 pods")
    stop = cli("stop", job_id)
    assert stop.returncode == 0 and "stopped" in stop.stdout, stop.stdout + stop.stderr
    assert _all_gone(server, timeout=20)
    status = json.loads(cli("status", job_id, "--json").stdout)
    assert status["state"] == "stopped" and status["backend"] == "kubernetes"


# -- nothing is left behind when tfdist itself dies ------------------------------------


def _wait_for(check: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_killed_supervisor_leaves_no_pod_service_or_policy(server, tmp_path) -> None:
    """SIGKILL the CLI mid-run: its reaper deletes what the run created, by label and name."""
    import signal
    import subprocess

    for task in ("chief-0", "worker-0", "worker-1", "ps-0"):
        server.cluster.scripts[task] = "hang"
    jobfile, env = _cli_files(server, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdist.cli", "run", "-q", str(jobfile), "--backend", "kubernetes"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_for(lambda: len(server.cluster.pods) == 4 and len(server.cluster.others) == 3, "4 pods")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        _wait_for(lambda: not server.cluster.pods and not server.cluster.others, "the reaper")
    finally:
        if proc.poll() is None:
            proc.kill()
    deletes = [path for method, path in server.cluster.requests if method == "DELETE"]
    assert "/api/v1/namespaces/ml/pods" in deletes  # one delete by label, not pod by pod


def test_the_reaper_reaches_the_server_of_a_handed_client(server, tmp_path) -> None:
    """A client handed to the backend (no kubeconfig) is what the reaper uses too."""
    for task in ("chief-0", "worker-0", "worker-1", "ps-0"):
        server.cluster.scripts[task] = "hang"
    backend = _backend(server, tmp_path)
    start_all(backend)
    reaper = backend._reaper
    assert reaper is not None and reaper.stdin is not None
    _wait_for(lambda: len(server.cluster.pods) == 4, "4 pods")
    reaper.stdin.close()  # what the OS does when this process is killed: end-of-file, no "exit"
    assert reaper.wait(timeout=30) == 0
    _wait_for(lambda: not server.cluster.pods and not server.cluster.others, "the reaper")
    backend._reaper = None
    backend.close()


def test_a_clean_close_dismisses_the_reaper(server, tmp_path) -> None:
    backend = _backend(server, tmp_path)
    start_all(backend)
    reaper = backend._reaper
    assert reaper is not None
    backend.close()
    assert reaper.poll() == 0 and backend._reaper is None
    assert _all_gone(server)


def test_observe_is_a_pure_mapping() -> None:
    pending = {"status": {"phase": "Pending"}}
    assert pods.observe(pending) == pods.PodView()
    deleted = pods.observe(pending, deleted=True)
    assert deleted.ended and deleted.reason == "pod deleted"
    # deleted by someone else while it ran: the container's plain exit after the kubelet's
    # SIGTERM (143, as every worker of the group that saved with it) says so; tfdist's own
    # delete (ours) does not
    term = {"exitCode": 143, "reason": "Error", "startedAt": "2026-01-01T00:00:00Z"}
    ended = {"phase": "Failed", "containerStatuses": [{"name": CONTAINER, "state": {"terminated": term}}]}
    going = {"metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"}, "status": ended}
    assert pods.observe(going) == pods.PodView(True, True, 143, pods.DELETED_OUTSIDE)
    assert pods.observe(going, ours=True) == pods.PodView(True, True, 143, None)
    assert pods.observe({"status": ended}).reason is None  # not being deleted
    assert pods.observe({**going, "status": {"phase": "Running"}}, deleted=True).reason == pods.DELETED_OUTSIDE
    assert pods.observe({**going, "status": {"phase": "Running"}}, deleted=True, ours=True).reason == "pod deleted"
    preempted = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                 "message": "Preempted in order to admit critical pod"}
    taken = pods.observe({**going, "status": {**ended, "conditions": [preempted]}})
    assert taken.reason == (f"{pods.DELETED_OUTSIDE} (PreemptionByScheduler: "
                            "Preempted in order to admit critical pod)")
    unsched = {
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    }
    assert not pods.observe(unsched, waited=1, grace=60).ended
    assert pods.observe(unsched, waited=1, grace=60).unscheduled  # the ticker judges it again
    assert not pods.observe({"status": {"phase": "Pending"}}).unscheduled
    assert pods.observe(unsched, waited=61, grace=60).exit_code == pods.EXIT_NOT_STARTED
    # an evicted pod as a kubelet reports it: the pod's reason, not the container's, says why
    gone = {"exitCode": 137, "reason": "ContainerStatusUnknown"}
    evicted = {"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory.",
                          "containerStatuses": [{"name": CONTAINER, "state": {"terminated": gone}}]}}
    assert pods.observe(evicted) == pods.PodView(False, True, 137, "Evicted: low on memory.")
    # killed for memory: the same root cause as a local task's cgroup, with the pod's own limit
    oom = {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-01-01T00:00:00Z"}
    spec = {"containers": [{"name": CONTAINER, "resources": {"limits": {"memory": "2Gi"}}}]}
    killed = pods.observe({"spec": spec, "status": {"phase": "Failed", "containerStatuses": [
        {"name": CONTAINER, "state": {"terminated": oom}}]}})
    assert (killed.exit_code, killed.reason) == (137, "OOMKilled: " + describe_memory_kill(2 << 30))
    assert "over its 2 GiB limit" in killed.reason and "strategy: parameter_server" in killed.reason
    assert progress_data(PROGRESS) == {"epoch": 1, "loss": 0.5}
    assert progress_data("TFDIST_PROGRESS not json") is None
    assert progress_data("hello") is None
    assert list(pods.iter_lines([b"a\nb", b"c\n", b"d"])) == ["a", "bc", "d"]
    assert names.run_id_of(Path("/x/digits_2025-01-01T10:00:00")) == "digits_2025-01-01T10-00-00"


def test_runs_of_a_long_named_job_get_run_labels_of_their_own() -> None:
    """The longest job name Kubernetes allows (49 characters) plus ``-<time>[-N]`` is over the
    63 characters of a label value: the ends, where two runs differ, are kept as a digest."""
    from tfdist.backends.k8s import supervised

    name = "n" * names.max_name_length("jobs")
    dirs = [f"{name}-20261130-233544", f"{name}-20261130-233544-2", f"{name}-20261130-233549"]
    ids = [names.run_id_of(Path("/runs") / d) for d in dirs]
    assert len(set(ids)) == 3
    for run_id in ids:
        assert len(run_id) <= 63 and labels.value_ok(run_id)
        assert run_id.startswith(name) and len(supervised.config_map_name(run_id)) <= 253
    assert len({supervised.config_map_name(i) for i in ids}) == 3
    assert names.run_id_of(Path("/runs") / dirs[0]) == ids[0]  # the same run, the same label


def test_a_tfjob_file_runs_as_supervised_pods(server, tmp_path) -> None:
    """examples/k8s/tfjob-digits.yaml with --backend kubernetes: the TFJob's image, command,
    args and env reach the pods, and the supervised run succeeds. Its chief and workers
    (MultiWorkerMirrored) run the command through tfdist's leave program (the job's drain,
    30 s), mounted from the run's ConfigMap that holds the program's text."""
    from tfdist import api
    from tfdist.jobspec.tfjob import LEAVE_KEY, LEAVE_PATH, LEAVE_VOLUME
    from tfdist.node import leave_program

    job = load.from_file(Path(__file__).resolve().parents[3] / "examples" / "k8s" / "tfjob-digits.yaml")
    result = api.run(job, backend="kubernetes", run_dir=tmp_path / "run", quiet=True,
                     options=BackendOptions(kubernetes_client=server.api_client()))
    assert result.exit_code == 0, result
    pods = {obj["metadata"]["labels"]["tfdist.io/task"]: obj
            for _, kind, obj in server.cluster.history if kind == "ADDED"}
    assert sorted(pods) == ["chief-0", "worker-0", "worker-1"]
    for pod in pods.values():
        (main,) = pod["spec"]["containers"]
        assert main["image"] == "registry.example/tfdist-digits:0.1"
        assert main["workingDir"] == "/app/examples/k8s"  # the TFJob's, where ../digits resolves
        assert main["command"] == ["python", LEAVE_PATH, "30", "../digits/train_fit.py", "--epochs", "2"]
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == LEAVE_VOLUME]
        (program,) = [obj for obj in server.cluster.created_others
                      if obj["metadata"]["name"] == volume["configMap"]["name"]]
        assert program["kind"] == "ConfigMap" and program["data"] == {LEAVE_KEY: leave_program.program_source()}
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["TF_CPP_MIN_LOG_LEVEL"] == "2" and "TF_CONFIG" in env
    assert pod["metadata"]["namespace"] == "ml"
    assert _all_gone(server)


def test_a_restarted_pss_chief_is_created_once_the_new_ps_pod_has_an_address(server, tmp_path) -> None:
    """The chief restarts with the ps (parameter_server): its pod is created only after the
    new ps pod has an IP, so the ps's DNS name is published before the chief's TensorFlow
    looks it up (created together, the restarted chief failed to resolve it under load)."""
    server.cluster.scripts.update({"ps-0": ["fail", "hang"], "chief-0": "hang", "worker-0": "hang",
                                   "worker-1": "hang"})
    backend = _backend(server, tmp_path)
    try:
        tasks = start_all(backend)
        events_until(backend, {"ps-0"}, timeout=10)
        backend.stop(["chief-0"], 0)
        backend.start(tasks["chief-0"], 1)  # the supervisor's order: chief-0, then ps-0
        backend.start(tasks["ps-0"], 1)
        events_until(backend, {"chief-0", "ps-0"}, kind=Started, timeout=10)
        order = [(kind, obj["metadata"]["name"], (obj.get("status") or {}).get("podIP"))
                 for _, kind, obj in server.cluster.history]
        chief_added = order.index(("ADDED", "fake-job-chief-0-a1", None))
        ps_addressed = next(i for i, (kind, name, ip) in enumerate(order) if name == "fake-job-ps-0-a1" and ip)
        assert ps_addressed < chief_added, order
    finally:
        backend.close()

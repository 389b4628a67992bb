"""`tfdist run --backend kubernetes` on real pods: the real node of kube/node.sh (containerd,
runc, a kubelet, CoreDNS on a private bridge) beside kwok's fake ones. The containers run
``localhost/tfdist:dev``, whose /usr, Python environment and checkout are the host's,
bind-mounted read-only (kube/image.py), so TensorFlow really trains in them.

tfdist is run as a user runs it (the CLI, a subprocess), placed on the real node by the
job's node selector and toleration (the node is tainted so that the kwok tests' pods stay on
kwok's nodes). Needs `make kube-up`; skips with kube/node.sh's reason when the node is not up.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backends.k8s.k8s_helpers import ROOT
from tests.backends.k8s.kube_cluster import KUBECONFIG, Cluster, wait_until
from tfdist import states
from tfdist.backends.k8s import manifests, names, pods
from tfdist.jobspec import load, model
from tfdist.jobspec.tfjob import CONTAINER

NODE = "tfdist-node-0"
NODE_UNAVAILABLE = ROOT / ".kube" / "node-unavailable"
#: Where kube/node.sh writes the pod network it chose at `up` (kube/pod_network.py).
POD_NETWORK_FILE = ROOT / ".kube" / "pod-network"
#: containerd's socket on the node (kube/node.sh; one such node per machine).
CONTAINERD = "/run/tfdist-node/containerd.sock"
IMAGE = "localhost/tfdist:dev"
DIGITS = ROOT / "examples" / "digits"


def _in_pod_network(addresses: Iterable[str]) -> bool:
    """Are all ``addresses`` in the real node's pod network (a documentation /24 nothing else
    on the machine uses, read once per call)?"""
    network = ipaddress.IPv4Network(POD_NETWORK_FILE.read_text().strip())
    return all(ipaddress.ip_address(a) in network for a in addresses)


def _placement(namespace: str) -> list[str]:
    """The --set options that put a job's pods on the real node, in the test's namespace."""
    return [
        "--set", f"kubernetes.image={IMAGE}",
        "--set", "kubernetes.image_pull_policy=Never",
        "--set", f"kubernetes.namespace={namespace}",
        "--set", 'kubernetes.node_selector={"tfdist.io/real-node": "true"}',
        "--set", 'kubernetes.tolerations=[{"key": "tfdist.io/real-node", "operator": "Exists", "effect": "NoSchedule"}]',
    ]


#: Each task's CPU request: a pod without one is BestEffort, whose cgroup gets cpu.shares 2,
#: and on a busy machine its TensorFlow missed the coordination service's heartbeats.
CPUS = 0.6


def _roles(**replicas: int) -> dict[str, Any]:
    return {role: {"replicas": n, "resources": {"cpus": CPUS}} for role, n in replicas.items()}


def _digits(tmp_path: Path, epochs: int, workdir: Path = DIGITS) -> str:
    """examples/digits/mwms.yaml with a CPU request per task and ``epochs``, working in
    ``workdir``; its path."""
    job = yaml.safe_load((DIGITS / "mwms.yaml").read_text())
    job.update(roles=_roles(**job["roles"]), workdir=str(workdir),
               command=["python", "train_fit.py", "--epochs", str(epochs)])
    (tmp_path / "mwms.yaml").write_text(yaml.safe_dump(job))
    return str(tmp_path / "mwms.yaml")


@pytest.fixture(scope="session")
def real_node(kube: Cluster) -> Cluster:
    if NODE_UNAVAILABLE.exists():
        pytest.skip(f"no real node: {NODE_UNAVAILABLE.read_text().strip()}")
    from kubernetes.client.exceptions import ApiException

    try:
        node = kube.call("GET", f"/api/v1/nodes/{NODE}")
    except ApiException:
        pytest.skip("no real node registered; restart the cluster with: make kube-down kube-up")
    conditions = node.get("status", {}).get("conditions", [])
    if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
        pytest.skip(f"the real node {NODE} is not Ready; restart the cluster with: make kube-down kube-up")
    return kube


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(KUBECONFIG=str(KUBECONFIG), TFDIST_HOME=str(tmp_path / "home"),
               PYTHONPATH=str(ROOT / "src"))
    return env


def _tfdist(tmp_path: Path, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfdist.cli", *args], cwd=cwd, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=timeout)


def _job_pods(kube: Cluster, namespace: str) -> list[dict[str, Any]]:
    return kube.list(f"/api/v1/namespaces/{namespace}/pods")


def _restarting_run(tmp_path: Path, job_file: str, namespace: str, *settings: str, restarts: int = 2) -> list[str]:
    """``tfdist run`` of ``job_file`` on the real node with on-failure restarts (``restarts``);
    ``--verbose``, because these tests wait for Keras's epoch lines, which the terminal folds."""
    return [sys.executable, "-m", "tfdist.cli", "run", job_file, "--backend", "kubernetes",
            *_placement(namespace), "--set", f"kubernetes.working_dir={DIGITS}", *settings,
            "--set", "restart.policy=on-failure", "--set", f"restart.max_restarts={restarts}",
            "--runs-dir", str(tmp_path / "runs"), "--verbose"]


def _run_with_fault(tmp_path: Path, args: list[str], started: str, what: str, fault: Any,
                    *more: tuple[str, str, Any]) -> tuple[int, str]:
    """Run ``args``; once its output shows ``started`` (``what``, for the failure), call
    ``fault()``; then each of ``more`` (started, what, fault) likewise, in the output after
    the previous fault; wait for the run's end. Its exit code and output."""
    out = tmp_path / "run.out"
    with open(out, "w") as handle:
        proc = subprocess.Popen(args, cwd=tmp_path, env=_env(tmp_path), stdout=handle, stderr=subprocess.STDOUT)
    try:
        seen = 0
        for mark, waited, act in [(started, what, fault), *more]:
            wait_until(lambda mark=mark, seen=seen: mark in out.read_text()[seen:], 300, waited)
            seen = len(out.read_text())
            act()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    return proc.returncode, out.read_text()


def _first_attempt_ended(tmp_path: Path, task: str) -> int | None:
    """The exit code the run's events.jsonl records for ``task``'s first attempt's end (failed,
    or stopped by a group restart that another task's exit, reported first, began)."""
    (run_dir,) = (tmp_path / "runs").iterdir()
    ends = [e for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
            if e["task"] == task and e.get("attempt") == 0 and e["state"] in ("failed", "stopped")]
    assert len(ends) == 1, ends
    return ends[0].get("exit_code")


def _kill_container(kube: Cluster, namespace: str, task: str) -> None:
    """SIGKILL of ``task``'s container by containerd (as the kernel would for memory)."""
    container = wait_until(lambda: _container_id(kube, namespace, task), 30, f"{task}'s container")
    subprocess.run(["ctr", "--address", CONTAINERD, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", container],
                   check=True, capture_output=True, timeout=30)


def test_the_kubernetes_page_s_real_node_line_runs_as_written(real_node: Cluster, tmp_path: Path) -> None:
    """docs/kubernetes.md's real-node line, as written from the checkout's root: the digits
    MWMS example on real pods, TensorFlow's all-reduce between three containers (so every
    task reached the others by the names in TF_CONFIG); each container's own line in tfdist's
    output; `tfdist logs` showing what the container printed, after its pod is gone.

    The example's scripts reach the pods shipped (kubernetes.ship_workdir, by default): the
    image's working directory is ``/``, and with ``--set kubernetes.ship_workdir=false`` the
    same run fails (python cannot open ``/train_fit.py``). The chief and workers ran the
    script through tfdist's leave program, mounted from the run's ConfigMap."""
    from tests.examples.test_readme import DOCS, readme_runs, run_as_written

    (argv,) = [a for a in readme_runs("kubernetes", page=DOCS / "kubernetes.md") if f"kubernetes.image={IMAGE}" in a]
    env = {"KUBECONFIG": str(KUBECONFIG), "TFDIST_HOME": str(tmp_path / "home")}

    def check(run_dir: Path) -> None:
        result = json.loads((run_dir / "summary.json").read_text())
        assert {t["name"]: t["state"] for t in result["tasks"]} == dict.fromkeys(
            ["chief-0", "worker-0", "worker-1"], "succeeded"), result
        # everything of the run is gone from the cluster (tfdist deletes its pods at the end)
        wait_until(lambda: not _job_pods(real_node, "default"), 60, "the run's pods deleted")
        # the log is the container's: the model path is the pod's run directory, not the host's
        logs = _tfdist(tmp_path, "logs", "digits-mwms", "--task", "chief-0", cwd=tmp_path, timeout=60)
        assert logs.returncode == 0, logs.stderr
        assert "chief-0: saved the model to /tmp/tfdist-run/model" in logs.stdout, logs.stdout[-2000:]
        for task in ("chief-0", "worker-0", "worker-1"):  # through the leave program, in the pod
            log = (run_dir / "logs" / f"{task}.log").read_text()
            assert f"tfdist: {task} left with its peers" in log, log[-2000:]

    done = run_as_written(argv, tmp_path, env=env, timeout=600, check=check)
    assert "job digits-mwms  succeeded" in done.stdout, done.stdout[-2000:]
    lines = done.stdout.splitlines()
    for task in ("chief-0", "worker-0", "worker-1"):  # each container's own line
        assert any(line.startswith(f"[{task}]") and f"{task}: 3 replicas in sync" in line for line in lines), task


@pytest.fixture
def shared_claim(real_node: Cluster, namespace: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A PersistentVolumeClaim in the test's namespace bound to a hostPath PersistentVolume,
    and the host directory behind it: on a single real node every pod that mounts the claim
    sees the same directory (as a ReadWriteMany volume would on a real cluster)."""
    directory = tmp_path / "volume"
    directory.mkdir()
    volume, claim = f"{namespace}-model", "model"
    real_node.call("POST", "/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": str(directory), "type": "Directory"},
                 "claimRef": {"namespace": namespace, "name": claim}},
    })
    try:
        real_node.create({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }, namespace)
        wait_until(lambda: real_node.call("GET", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
                   .get("status", {}).get("phase") == "Bound", 60, "the claim bound")
        yield claim, directory
    finally:
        real_node.call("DELETE", f"/api/v1/persistentvolumes/{volume}")


def _pss_job(tmp_path: Path, epochs: int) -> str:
    """examples/digits/pss_fit.yaml with ``epochs``, five pods within the node's 2 CPUs of
    requests (the scheduler refused 4 x 0.6 + 0.2); its path."""
    job = yaml.safe_load((DIGITS / "pss_fit.yaml").read_text())
    job.update(roles={role: {"replicas": n, "resources": {"cpus": 0.2 if role == "evaluator" else 0.4}}
                      for role, n in job["roles"].items()},
               workdir=str(DIGITS), command=["python", "train_pss_fit.py", "--epochs", str(epochs)])
    (tmp_path / "pss.yaml").write_text(yaml.safe_dump(job))
    return str(tmp_path / "pss.yaml")


def test_a_killed_pss_worker_restarts_alone_and_a_killed_ps_with_the_chief_and_resumes(
    real_node: Cluster, namespace: str, tmp_path: Path, shared_claim: tuple[str, Path]
) -> None:
    """Under PSS on real pods, two container kills in one run. A worker's: it restarts alone
    (the coordinator re-dispatches its steps), training goes on. Then the ps's: tfdist
    restarts the ps with the chief (the variables were on the ps) and, on Kubernetes, the
    workers (their gRPC channels held the failed lookup of the ps's name while it was down:
    the restarted chief failed on the workers' "errors resolving" before); the chief's
    BackupAndRestore resumes from the backup in the shared volume, not from epoch 1, and the
    job succeeds.

    Which task the restart line names after the ps's kill depends on which exit the kubelet
    reports first: the chief fails about a second after the ps, and the kubelet (its relist
    every second, slower under load) can report both at once, the chief's first (once in CI
    here, 2026-12-06: "chief-0 failed (exit code 1); restarting chief-0, worker-0, worker-1,
    ps-0", the ps's 137 recorded 2 s later). The restart is the same either way; what is
    checked is that one restart of the group follows the ps's kill and that the ps's first
    attempt ended with the kill's 137 (docs/kubernetes.md says what the line may name)."""
    claim, _ = shared_claim
    args = _restarting_run(tmp_path, _pss_job(tmp_path, 12), namespace,
                           "--set", f"kubernetes.model_volume_claim={claim}", restarts=3)
    code, text = _run_with_fault(tmp_path, args, "Epoch 2/12", "the chief in its second epoch",
                                 lambda: _kill_container(real_node, namespace, "worker-1"),
                                 ("Epoch 5/12", "the chief in its fifth epoch",
                                  lambda: _kill_container(real_node, namespace, "ps-0")))
    assert code == 0, text[-4000:]
    assert "job digits-pss-fit  succeeded" in text and "restarts 2 of 3 used" in text, text[-3000:]
    assert "worker-1 failed (exit code 137); restarting worker-1 in" in text, text[-4000:]
    group = "; restarting chief-0, worker-0, worker-1, ps-0 in"
    (restart,) = [line for line in text.splitlines() if group in line]
    assert restart.startswith(("tfdist: ps-0 failed (exit code 137)", "tfdist: chief-0 failed (exit code 1)")), restart
    assert _first_attempt_ended(tmp_path, "ps-0") == 137
    after = text.split(restart, 1)[1]
    resumed = [int(line.split("Epoch ", 1)[1].split("/")[0]) for line in after.splitlines()
               if line.startswith("[chief-0]") and "Epoch " in line and "/12" in line]
    assert resumed and resumed[0] > 1 and resumed[-1] == 12, resumed  # from the backup, to the end
    wait_until(lambda: not _job_pods(real_node, namespace), 60, "the run's pods deleted")


def test_an_oom_killed_container_is_named_with_its_limit(
    real_node: Cluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task allocating past resources.memory: the kernel kills it in its container's
    cgroup, the kubelet says OOMKilled, and the root cause says so in the words of the local
    backend's memory kill (the limit, parameter servers as the way out); `tfdist logs` and the
    dashboard's log view show what the container printed, after its pod is gone."""
    grow = ("import time\nheld = []\nfor i in range(64):\n"
            "    held.append(bytearray(16 << 20)); print('holding', (i + 1) * 16, 'MiB', flush=True); time.sleep(0.05)")
    job = {"name": "oom", "strategy": "one_device", "command": ["python", "-c", grow],
           "roles": {"chief": {"replicas": 1, "resources": {"cpus": 0.2, "memory": "128Mi"}}}}
    (tmp_path / "oom.yaml").write_text(yaml.safe_dump(job))
    done = _tfdist(tmp_path, "run", "oom.yaml", "--backend", "kubernetes", *_placement(namespace),
                   "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    cause = next((line for line in done.stdout.splitlines() if line.startswith("root cause:")), "")
    assert cause.startswith("root cause: chief-0: OOMKilled: ") and states.describe_memory_kill(128 << 20) in cause, \
        done.stdout[-3000:]
    wait_until(lambda: not _job_pods(real_node, namespace), 60, "the run's pods deleted")
    logs = _tfdist(tmp_path, "logs", "oom", "--task", "chief-0", cwd=tmp_path, timeout=60)
    assert logs.returncode == 0 and "holding 112 MiB" in logs.stdout, logs.stdout[-2000:] + logs.stderr
    # the dashboard reads the same copy (the run's log file, streamed from the kubelet)
    pytest.importorskip("starlette", reason="the dashboard's extra is not installed")
    from starlette.testclient import TestClient

    from tfdist.jobs.location import location
    from tfdist.ui.app import create_app

    (run_dir,) = (tmp_path / "runs").iterdir()
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TFDIST_STORE", raising=False)
    with TestClient(create_app(location(), "t0ken", stop=lambda store, job: None),
                    base_url="http://127.0.0.1:8470") as client:
        page = client.get(f"/jobs/{run_dir.name}/logs/chief-0", headers={"Authorization": "token t0ken"})
    assert page.status_code == 200 and "holding 112 MiB" in json.dumps(page.json()["lines"]), page.text[-2000:]


# Each task: resolve every name in TF_CONFIG (retrying while the others' pods start), listen
# on its own port, connect to every other task, and wait until every other task connected to
# it; print what it resolved, as JSON.
PEERS = """
import json, os, socket, time
config = json.loads(os.environ["TF_CONFIG"])
me = "%s-%d" % (config["task"]["type"], config["task"]["index"])
tasks = {"%s-%d" % (r, i): a for r, addrs in config["cluster"].items() for i, a in enumerate(addrs)}
port = int(tasks[me].rsplit(":", 1)[1])
server = socket.create_server(("", port))
server.settimeout(120)
resolved, deadline = {}, time.time() + 120
for task, address in tasks.items():
    host, peer_port = address.rsplit(":", 1)
    while True:
        try:
            resolved[task] = socket.gethostbyname(host)
            if task != me:
                socket.create_connection((host, int(peer_port)), timeout=5).close()
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)
for _ in range(len(tasks) - 1):
    server.accept()[0].close()
print("peers " + json.dumps({"me": me, "resolved": resolved}), flush=True)
"""


def test_tf_config_names_resolve_and_connect_in_pods(real_node: Cluster, namespace: str, tmp_path: Path) -> None:
    """Every task's TF_CONFIG (from the run's ConfigMap) names pod DNS names that CoreDNS
    resolves, inside the pods, to the pods' addresses, and that accept connections."""
    job = {"name": "peers", "strategy": "multi_worker_mirrored", "roles": _roles(chief=1, worker=2),
           "command": ["python", "-c", PEERS]}
    (tmp_path / "peers.yaml").write_text(yaml.safe_dump(job))
    done = _tfdist(tmp_path, "run", "peers.yaml", "--backend", "kubernetes", *_placement(namespace),
                   "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = [json.loads(line.split("peers ", 1)[1]) for line in done.stdout.splitlines() if "peers {" in line]
    assert sorted(s["me"] for s in seen) == ["chief-0", "worker-0", "worker-1"], done.stdout[-2000:]
    first = seen[0]["resolved"]
    assert len(set(first.values())) == 3, first  # one address per pod
    assert _in_pod_network(first.values()), first
    assert all(s["resolved"] == first for s in seen), seen  # every task sees the same map


def _container_id(kube: Cluster, namespace: str, task: str) -> str | None:
    for pod in _job_pods(kube, namespace):
        if pod["metadata"]["labels"].get(names.LABEL_TASK) != task:
            continue
        for status in pod.get("status", {}).get("containerStatuses") or []:
            if "running" in (status.get("state") or {}):
                return str(status["containerID"]).split("://", 1)[1]
    return None


def test_a_killed_container_restarts_the_group_which_resumes_from_its_backup_on_a_volume(
    real_node: Cluster, namespace: str, tmp_path: Path, shared_claim: tuple[str, Path]
) -> None:
    """SIGKILL of a worker's container mid-training (by containerd, as the kernel would for
    memory): tfdist's policy restarts the MWMS group; with kubernetes.model_volume_claim the
    new pods find the group's backup in the volume and resume after the last epoch saved
    (without a volume each new pod's run directory is empty: it would start at epoch 1), and
    the job succeeds. The killed container's 137 is recorded; the restart line names it or a
    peer whose collective failed within the same second and whose exit the kubelet reported
    first (once in CI here, 2026-12-07: worker-1's exit 1 84 ms before worker-0's 137), as
    under PSS below (docs/kubernetes.md)."""
    claim, directory = shared_claim
    # once worker-0 is in its second epoch (the first one's backup saved), kill its container
    args = _restarting_run(tmp_path, _digits(tmp_path, 4), namespace, "--set", f"kubernetes.model_volume_claim={claim}")
    code, text = _run_with_fault(tmp_path, args, "[worker-0] Epoch 2/4", "worker-0 in its second epoch",
                                 lambda: _kill_container(real_node, namespace, "worker-0"))
    assert code == 0, text[-4000:]
    assert "job digits-mwms  succeeded" in text, text[-2000:]
    assert "restarts 1 of 2 used" in text, text[-2000:]
    (restart,) = [line for line in text.splitlines() if "; restarting chief-0, worker-0, worker-1 in" in line]
    assert restart.startswith(("tfdist: worker-0 failed (exit code 137)", "tfdist: worker-1 failed (exit code 1)",
                               "tfdist: chief-0 failed (exit code 1)")), restart
    assert _first_attempt_ended(tmp_path, "worker-0") == 137  # the killed container's exit code
    after = text.split(restart, 1)[1]
    resumed = [int(line.split("Epoch ", 1)[1].split("/")[0]) for line in after.splitlines()
               if line.startswith("[chief-0]") and "Epoch " in line and "/4" in line]
    assert resumed and resumed[0] > 1 and resumed[-1] == 4, resumed  # from the backup, to the end
    assert (directory / "model" / "saved_model.pb").is_file()
    wait_until(lambda: not _job_pods(real_node, namespace), 60, "the run's pods deleted")


def test_kwok_nodes_keep_pods_that_do_not_ask_for_the_real_node(real_node: Cluster) -> None:
    """The real node is tainted: a pod without the toleration is never placed on it (the kwok
    tests' pods, which have no image to run, stay on kwok's nodes)."""
    node = real_node.call("GET", f"/api/v1/nodes/{NODE}")
    taints = node["spec"].get("taints") or []
    assert {"key": "tfdist.io/real-node", "value": "true", "effect": "NoSchedule"} in taints
    assert node["metadata"]["labels"].get("tfdist.io/real-node") == "true"


def test_a_deleted_pod_restarts_the_group_and_the_job_succeeds(
    real_node: Cluster, namespace: str, tmp_path: Path
) -> None:
    """A worker's pod deleted mid-training (its container gets SIGTERM from the kubelet):
    tfdist starts the MWMS group again by its policy, and the job succeeds."""
    def delete_worker_1() -> None:
        (pod,) = [p for p in _job_pods(real_node, namespace)
                  if p["metadata"]["labels"].get(names.LABEL_TASK) == "worker-1"]
        real_node.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")

    code, text = _run_with_fault(tmp_path, _restarting_run(tmp_path, _digits(tmp_path, 2), namespace),
                                 "[worker-1] Epoch 1/2", "worker-1 training", delete_worker_1)
    assert code == 0, text[-4000:]
    assert "job digits-mwms  succeeded" in text and "restarts 1 of 2 used" in text, text[-2000:]
    # the deleted pod is named, not the first of the group to exit: every worker saves at the
    # step worker-1 proposed and exits 143 alike (a bug this found blamed chief-0 or worker-0)
    assert f"worker-1 failed ({pods.DELETED_OUTSIDE}); restarting" in text, text[-4000:]
    assert "chief-0 failed" not in text and "worker-0 failed" not in text, text[-4000:]
    wait_until(lambda: not _job_pods(real_node, namespace), 60, "the run's pods deleted")


def test_a_missing_image_fails_at_once_in_one_line(real_node: Cluster, namespace: str, tmp_path: Path) -> None:
    """An image the node does not have (and may not pull) ends the run with the kubelet's
    reason, without waiting for a timeout."""
    job = {"name": "noimage", "strategy": "one_device", "roles": _roles(chief=1), "command": ["python", "-c", "pass"]}
    (tmp_path / "noimage.yaml").write_text(yaml.safe_dump(job))
    placement = _placement(namespace)
    placement[1] = "kubernetes.image=localhost/no-such-image:dev"
    done = _tfdist(tmp_path, "run", "noimage.yaml", "--backend", "kubernetes", *placement,
                   "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, timeout=120)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "ErrImageNeverPull" in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    wait_until(lambda: not _job_pods(real_node, namespace), 60, "the run's pods deleted")


def _node_containers(namespace: str) -> set[str]:
    """The ids of the node's containers (pod sandboxes too) of pods in ``namespace``."""
    listed = subprocess.run(["ctr", "--address", CONTAINERD, "-n", "k8s.io", "containers", "ls", "-q",
                             f'labels."io.kubernetes.pod.namespace"=={namespace}'],
                            check=True, capture_output=True, text=True, timeout=30)
    return set(listed.stdout.split())


def _node_tasks() -> dict[str, str]:
    """containerd's tasks on the node (a container's process), by container id: their status."""
    listed = subprocess.run(["ctr", "--address", CONTAINERD, "-n", "k8s.io", "tasks", "ls"],
                            check=True, capture_output=True, text=True, timeout=30)
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    return {row[0]: row[-1] for row in rows if row}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_ctrl_c_or_sigkill_of_tfdist_leaves_no_pod_object_or_container(
    sig: signal.Signals, real_node: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Ctrl-C stops the tasks and deletes the run's objects itself; after SIGKILL, tfdist's
    reaper (a process of its own session, told every object as it is made) deletes them when
    its stdin closes. Either way the kubelet then stops the containers: no pod, ConfigMap,
    Service or NetworkPolicy of the run stays, and no container process on the node."""
    job = {"name": "sleeper", "strategy": "multi_worker_mirrored", "roles": _roles(chief=1, worker=1),
           "command": ["python", "-c", "import time; print('up', flush=True); time.sleep(900)"]}
    (tmp_path / "sleeper.yaml").write_text(yaml.safe_dump(job))
    args = [sys.executable, "-m", "tfdist.cli", "run", "sleeper.yaml", "--backend", "kubernetes",
            *_placement(namespace), "--runs-dir", str(tmp_path / "runs")]
    out = tmp_path / "run.out"
    with open(out, "w") as handle:
        proc = subprocess.Popen(args, cwd=tmp_path, env=_env(tmp_path), stdout=handle, stderr=subprocess.STDOUT)
    try:
        def printed() -> set[str]:  # the tasks whose "up" is out ("[chief-0]  up": names are padded)
            return {line.split("]", 1)[0][1:] for line in out.read_text().splitlines()
                    if line.startswith("[") and line.split("]", 1)[-1].strip() == "up"}

        wait_until(lambda: printed() == {"chief-0", "worker-0"}, 180, "both containers running")
        maps = real_node.list(f"/api/v1/namespaces/{namespace}/configmaps",
                              labelSelector="app.kubernetes.io/managed-by=tfdist")
        # the cluster map and the shipped workdir (the job's, tmp_path: kubernetes.ship_workdir)
        assert sorted(m["metadata"]["name"].rsplit("-", 1)[1] for m in maps) == ["cluster", "workdir"], maps
        containers = _node_containers(namespace)
        assert len(containers) == 4, containers  # two pods: a sandbox and a task container each
        assert all(_node_tasks().get(c) == "RUNNING" for c in containers), _node_tasks()
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == 130, out.read_text()[-3000:]
    managed = "app.kubernetes.io/managed-by=tfdist"

    def left() -> list[str]:
        found = [f"pod {p['metadata']['name']}" for p in _job_pods(real_node, namespace)]
        for kind in ("configmaps", "services"):
            found += [f"{kind} {o['metadata']['name']}" for o in
                      real_node.list(f"/api/v1/namespaces/{namespace}/{kind}", labelSelector=managed)]
        found += [f"networkpolicy {o['metadata']['name']}" for o in real_node.list(
            f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies", labelSelector=managed)]
        tasks = _node_tasks()
        found += [f"container {c} {tasks[c]}" for c in containers if c in tasks]
        return found

    try:
        wait_until(lambda: not left(), 120, "the run's objects and containers gone")
    except pytest.fail.Exception:
        pytest.fail(f"left after {sig.name} of tfdist: {left()}")


#: The examples' scripts, run after every name in TF_CONFIG resolved inside the pod.
RESOLVE_THEN_RUN = Path(__file__).with_name("resolve_then_run.py")


def _rendered(example: str, script: str, namespace: str, **kubernetes: Any) -> model.JobSpec:
    """examples/digits/<example> for the real node: CPU requests, one epoch, the script run
    by RESOLVE_THEN_RUN (``python FILE SCRIPT``: MWMS's chief and workers run it through
    tfdist's leave program), placed on the node, working in the example's directory."""
    data = yaml.safe_load((DIGITS / example).read_text())
    return _on_the_node(data, [script, "--epochs", "1"], DIGITS, namespace, **kubernetes)


def _on_the_node(data: dict[str, Any], script: list[str], directory: Path, namespace: str,
                 **kubernetes: Any) -> model.JobSpec:
    """The job ``data`` for the real node, its ``script`` run by RESOLVE_THEN_RUN in
    ``directory`` (the checkout is mounted in the pods at its own path)."""
    cpus = {"evaluator": 0.2} if data["strategy"] == "parameter_server" else {}
    default = 0.4 if data["strategy"] == "parameter_server" else CPUS
    data.update(roles={role: {"replicas": n, "resources": {"cpus": cpus.get(role, default)}}
                       for role, n in data["roles"].items()},
                command=["python", str(RESOLVE_THEN_RUN), *script],
                kubernetes={"image": IMAGE, "image_pull_policy": "Never", "namespace": namespace,
                            "node_selector": {"tfdist.io/real-node": "true"},
                            "tolerations": [{"key": "tfdist.io/real-node", "operator": "Exists",
                                             "effect": "NoSchedule"}],
                            "working_dir": str(directory), **kubernetes})
    return load.from_dict(data, data["name"])


def _pod_log(kube: Cluster, namespace: str, pod: str) -> str:
    """A container's log through the API server (read from the real node's kubelet); "" if
    it has none yet."""
    client = kube.api_client
    method, url, headers, body, _ = client.param_serialize(
        "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", query_params=[("container", CONTAINER)],
        auth_settings=["BearerToken"], header_params={"Accept": "*/*"})
    resp = client.call_api(method, url, headers, body, _request_timeout=30)
    return resp.read().decode(errors="replace") if resp.status < 400 else ""


class _Peers:
    """Each task's "peers" line, read from its pod's log while the job runs (JobSet deletes
    the other Jobs' pods once the chief succeeds), and the pods' addresses by task."""

    def __init__(self, kube: Cluster, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.seen: dict[str, dict[str, str]] = {}  # task -> what it resolved
        self.addresses: dict[str, str] = {}  # the pod's IP, by its DNS name's host part

    def poll(self) -> None:
        for pod in _job_pods(self.kube, self.namespace):
            spec, status = pod["spec"], pod.get("status") or {}
            if spec.get("hostname") and status.get("podIP"):
                self.addresses[spec["hostname"]] = status["podIP"]
            name = pod["metadata"]["name"]
            if name in self.seen or "running" not in str(status.get("containerStatuses")) \
                    and status.get("phase") != "Succeeded":
                continue
            for line in _pod_log(self.kube, self.namespace, name).splitlines():
                if line.startswith("peers {"):
                    found = json.loads(line.split("peers ", 1)[1])
                    self.seen[name] = {"me": found["me"], **found["resolved"]}

    def check(self, tasks: list[str], tf_config_hosts: dict[str, str]) -> None:
        """Every task printed its line; each resolved the name of every task in TF_CONFIG's
        cluster to that task's pod IP (on the pod network), the same map in every task."""
        by_task = {seen.pop("me"): seen for seen in list(self.seen.values())}
        assert sorted(by_task) == sorted(tasks), by_task
        expected = {task: self.addresses[host] for task, host in tf_config_hosts.items()
                    if not task.startswith("evaluator-")}  # TF_CONFIG's cluster has no evaluator
        for task, resolved in by_task.items():
            assert resolved == expected, (task, resolved, expected)
        assert _in_pod_network(expected.values()), expected


def _hosts(job: model.JobSpec, form: str) -> dict[str, str]:
    """The host part of each task's address in the TF_CONFIG the form renders, by task."""
    found = names.addresses(job, form)
    return {task: address.rsplit(":", 1)[0].split(".", 1)[0] for task, address in found.items()}


MWMS_TASKS = ["chief-0", "worker-0", "worker-1"]
PSS_TASKS = ["chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0"]


def _conditions(kube: Cluster, path: str, wanted: set[str]) -> set[str]:
    conditions = kube.call("GET", path).get("status", {}).get("conditions") or []
    return {c["type"] for c in conditions if c["status"] == "True"} & wanted


def _as_jobset(kube: Cluster, namespace: str, job: model.JobSpec, tasks: list[str]) -> None:
    """``job`` rendered as a JobSet, run by the JobSet controller: the set completes, every
    task's TF_CONFIG names resolve in its pod to the pods' addresses; then all deleted."""
    objs = manifests.render(job, "jobset")
    for obj in objs:
        kube.create(obj, namespace)
    peers = _Peers(kube, namespace)
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{job.name}"

    def done() -> set[str]:
        peers.poll()
        return _conditions(kube, path, {"Completed", "Failed"})

    assert wait_until(done, 400, f"the {job.name} JobSet's end") == {"Completed"}
    peers.check(tasks, _hosts(job, "jobset"))
    kube.call("DELETE", path, propagationPolicy="Foreground")
    kube.call("DELETE", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{job.name}-grpc")
    _delete_config_maps(kube, namespace, objs)
    wait_until(lambda: not _job_pods(kube, namespace) and not kube.list(
        f"/api/v1/namespaces/{namespace}/services"), 120, "the JobSet's pods and Service deleted")


def _delete_config_maps(kube: Cluster, namespace: str, objs: list[dict[str, Any]]) -> None:
    """Delete the rendered ConfigMaps (the leave program's), as `kubectl delete -f` would."""
    for obj in objs:
        if obj["kind"] == "ConfigMap":
            kube.call("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{obj['metadata']['name']}")


def _as_tfjob(kube: Cluster, namespace: str, tmp_path: Path, job: model.JobSpec, tasks: list[str],
              ) -> subprocess.CompletedProcess[str]:
    """``job`` rendered as a TFJob, read back as a job file and run by `tfdist run --backend
    kubernetes` (no TFJob operator runs here): it succeeds, and every task resolved the same
    map of TF_CONFIG's names to pod addresses. The run's output."""
    (tfjob,) = [obj for obj in manifests.render(job, "tfjob") if obj["kind"] == "TFJob"]
    (tmp_path / "tfjob.yaml").write_text(yaml.safe_dump(tfjob))
    done = _tfdist(tmp_path, "run", "tfjob.yaml", "--backend", "kubernetes",
                   "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = [json.loads(line.split("peers ", 1)[1]) for line in done.stdout.splitlines() if "peers {" in line]
    assert sorted(s["me"] for s in seen) == sorted(tasks), done.stdout[-2000:]
    assert len({tuple(sorted(s["resolved"].items())) for s in seen}) == 1, seen  # one map for all
    assert _in_pod_network(seen[0]["resolved"].values()), seen
    wait_until(lambda: not _job_pods(kube, namespace), 60, "the run's pods deleted")
    return done


def _as_jobs(kube: Cluster, namespace: str, job: model.JobSpec, tasks: list[str], ending: list[str]) -> None:
    """``job`` rendered as plain Jobs, run by the Job controller: the Jobs of the roles in
    ``ending`` complete (a ps's Job outlives training, as documented), every task's TF_CONFIG
    names resolve in its pod; then all deleted."""
    objs = manifests.render(job, "jobs")
    for obj in objs:
        kube.create(obj, namespace)
    peers = _Peers(kube, namespace)
    paths = [f"/apis/batch/v1/namespaces/{namespace}/jobs/{job.name}-{role}" for role in ending]

    def done() -> list[set[str]] | None:
        peers.poll()
        ends = [_conditions(kube, path, {"Complete", "Failed"}) for path in paths]
        return ends if all(ends) else None

    assert wait_until(done, 400, f"the {job.name} Jobs' end") == [{"Complete"}] * len(paths)
    wait_until(lambda: (peers.poll(), len(peers.seen) == len(tasks))[1], 60, "every task's peers line")
    peers.check(tasks, _hosts(job, "jobs"))
    for role in names.active_roles(job):
        kube.call("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{job.name}-{role}",
                  propagationPolicy="Foreground")
    kube.call("DELETE", f"/api/v1/namespaces/{namespace}/services/{job.name}")
    kube.call("DELETE", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{job.name}-grpc")
    _delete_config_maps(kube, namespace, objs)
    wait_until(lambda: not _job_pods(kube, namespace) and not kube.list(
        f"/api/v1/namespaces/{namespace}/services"), 120, "the Jobs' pods and Service deleted")


def _saved_then_cleared(directory: Path) -> None:
    """The SavedModel is in the shared volume; then the volume is emptied for the next run
    (runs with one claim share its directories)."""
    assert (directory / "model" / "saved_model.pb").is_file()
    for entry in directory.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def test_digits_mwms_rendered_as_jobset_tfjob_and_jobs_succeeds_in_real_pods(
    real_node: Cluster, jobset_controller: Cluster, namespace: str, tmp_path: Path,
) -> None:
    """The rendered forms on real pods, MWMS in every form: as a JobSet (run by the JobSet
    controller: the chief's success completes the set), as a TFJob read back as a job file
    (run by `tfdist run --backend kubernetes`: no TFJob operator runs here), as plain Jobs
    (every Job completes). In each, every task's TF_CONFIG names pod DNS names that resolve
    inside its pod to those pods' addresses. The chief and workers run their script through
    tfdist's leave program, mounted from its ConfigMap.

    The TFJob form runs code nobody here wrote: TensorFlow's multi-worker Keras tutorial,
    unchanged (tests/examples/test_peers.py runs it on this machine, the Spark tests on
    Spark). Every task leaves with its peers and exits by itself, 0: none is stopped at the
    drain, none ends more than the drain after the first."""
    from tests.examples.test_peers import JOB, PEERS, assert_left_together

    mwms = _rendered("mwms.yaml", "train_fit.py", namespace)
    _as_jobset(real_node, namespace, mwms, MWMS_TASKS)
    tutorial = _on_the_node(yaml.safe_load(JOB), ["keras_tutorial.py", "2", "5"], PEERS, namespace)
    _as_tfjob(real_node, namespace, tmp_path, tutorial, ["worker-0", "worker-1"])
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert_left_together(json.loads((run_dir / "summary.json").read_text()))
    _as_jobs(real_node, namespace, mwms, MWMS_TASKS, ["chief", "worker"])


def test_digits_pss_rendered_as_jobset_tfjob_and_jobs_succeeds_in_real_pods(
    real_node: Cluster, jobset_controller: Cluster, namespace: str, tmp_path: Path,
    shared_claim: tuple[str, Path],
) -> None:
    """PSS in every form, with the shared volume (kubernetes.model_volume_claim), which each
    run leaves its SavedModel in: as a JobSet (the chief's success completes the set and ends
    the ps), as a TFJob read back and run by tfdist, as plain Jobs (the chief's Job
    completes; the ps's and workers' Jobs outlive it, as documented). Every task's TF_CONFIG
    names resolve as in the MWMS test. In tfdist's run, the ps writes its share of each
    checkpoint where the chief's path points, the sidecar evaluator reads the chief's
    checkpoints, and the model is saved in the volume. (Without the volume the first save
    failed with NOT_FOUND .../ckpt-1_temp: tfdist now warns at start.)"""
    claim, directory = shared_claim
    pss = _rendered("pss_fit.yaml", "train_pss_fit.py", namespace, model_volume_claim=claim)
    _as_jobs(real_node, namespace, pss, PSS_TASKS, ["chief"])
    _saved_then_cleared(directory)
    _as_jobset(real_node, namespace, pss, PSS_TASKS)
    _saved_then_cleared(directory)
    done = _as_tfjob(real_node, namespace, tmp_path, pss, PSS_TASKS)
    assert "model_volume_claim" not in done.stderr, done.stderr  # no warning with a claim
    assert "chief: saved the model to /model/model" in done.stdout, done.stdout[-3000:]
    assert "evaluator: last evaluation {" in done.stdout, done.stdout[-3000:]
    # the checkpoint's shards (the chief's and the ps's) are in the one directory
    assert len(list((directory / "checkpoints").glob("ckpt-001.data-*-of-00002"))) == 2, \
        sorted(p.name for p in directory.rglob("*"))
    _saved_then_cleared(directory)

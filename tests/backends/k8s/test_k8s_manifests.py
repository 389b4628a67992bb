"""Rendered manifests: valid for Kubernetes and the CRDs, correct TF_CONFIG per pod, golden."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.backends.k8s.k8s_helpers import (
    GOLDEN,
    JOBS,
    K8S_VERSIONS,
    job,
    pod_env,
    validate_core,
    validate_crd,
)
from tfdist import cluster
from tfdist.backends.k8s import manifests, names, supervised
from tfdist.cluster import Task, TaskId
from tfdist.errors import SpecError
from tfdist.jobspec import tfjob
from tfdist.node import leave_program

CASES = [(name, mode) for name in JOBS for mode in names.MODES]
CRD_KINDS = ("JobSet", "TFJob")


def _objects(name: str, mode: str) -> list[dict]:
    return manifests.render(job(name), mode)


@pytest.mark.parametrize(("name", "mode"), CASES)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_objects_validate(name: str, mode: str, version: str) -> None:
    for obj in _objects(name, mode):
        if obj["kind"] in CRD_KINDS:
            continue
        validate_core(obj, version)


@pytest.mark.parametrize(("name", "mode"), [c for c in CASES if c[1] != "jobs"])
def test_custom_resources_validate_against_crd(name: str, mode: str) -> None:
    objs = [o for o in _objects(name, mode) if o["kind"] in CRD_KINDS]
    assert len(objs) == 1
    validate_crd(objs[0])


@pytest.mark.parametrize("name", JOBS)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_templates_inside_custom_resources_are_valid_core_objects(name: str, version: str) -> None:
    """The CRDs embed Job and pod templates; check them with the core schemas too."""
    (js,) = [o for o in _objects(name, "jobset") if o["kind"] == "JobSet"]
    for rj in js["spec"]["replicatedJobs"]:
        obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}}
        validate_core({**obj, "spec": rj["template"]["spec"]}, version)
    (tj,) = [o for o in _objects(name, "tfjob") if o["kind"] == "TFJob"]
    for replica in tj["spec"]["tfReplicaSpecs"].values():
        obj = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}}
        validate_core({**obj, "template": replica["template"]}, version)


def test_crd_validation_catches_a_typo() -> None:
    """The strict CRD check is worth something: an unknown field fails."""
    import jsonschema

    (js,) = [o for o in _objects("mwms", "jobset") if o["kind"] == "JobSet"]
    js["spec"]["replicatedJobs"][0]["replica"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(js)


#: What the goldens hold in place of the leave program's text (its own tests check it), so
#: that an edit of the program does not change every golden.
PROGRAM_TEXT = "<the text of tfdist/node/leave_program.py>"


def _golden_objects(name: str, mode: str) -> list[dict]:
    objs = _objects(name, mode)
    for obj in objs:
        if obj["kind"] == "ConfigMap" and tfjob.LEAVE_KEY in obj.get("data", {}):
            assert obj["data"][tfjob.LEAVE_KEY] == leave_program.program_source()
            obj["data"][tfjob.LEAVE_KEY] = PROGRAM_TEXT
    return objs


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_golden(name: str, mode: str) -> None:
    text = manifests.to_yaml(_golden_objects(name, mode))
    path = GOLDEN / f"{name}.{mode}.yaml"
    if os.environ.get("TFDIST_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing {path}; run with TFDIST_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{path} changed; review and re-run with TFDIST_UPDATE_GOLDEN=1"
    assert list(yaml.safe_load_all(text)) == _golden_objects(name, mode)


# -- TF_CONFIG as the pods see it ---------------------------------------------------


def _pods(mode: str, name: str) -> dict[str, dict[str, str]]:
    """Every pod's environment after the Job controller and kubelet did their part."""
    envs = {}
    for obj in _objects(name, mode):
        if obj["kind"] == "JobSet":
            templates = [(rj["name"], rj["template"]["spec"]) for rj in obj["spec"]["replicatedJobs"]]
        elif obj["kind"] == "Job":
            templates = [(obj["metadata"]["labels"]["tfdist.io/role"], obj["spec"])]
        else:
            continue
        for role, spec in templates:
            container = spec["template"]["spec"]["containers"][0]
            for index in range(spec["completions"]):
                envs[f"{role}-{index}"] = pod_env(
                    container,
                    annotations={"batch.kubernetes.io/job-completion-index": str(index)},
                    labels={"jobset.sigs.k8s.io/restart-attempt": "0"},
                )
    return envs


@pytest.mark.parametrize("mode", ["jobset", "jobs"])
@pytest.mark.parametrize("name", JOBS)
def test_each_pod_gets_the_tf_config_of_its_task(mode: str, name: str) -> None:
    spec = job(name)
    addresses = names.addresses(spec, mode)
    expected = {t.name: t.env for t in cluster.plan(spec, addresses, run_dir=names.pod_run_dir(spec))}
    envs = _pods(mode, name)
    assert set(envs) == set(expected)
    for task, env in envs.items():
        env.pop("JOB_COMPLETION_INDEX", None)  # the Job controller sets it in every pod
        assert env == expected[task], task
        assert json.loads(env["TF_CONFIG"])["task"]["index"] == TaskId.parse(task).index


def test_hostnames_follow_the_controllers_naming() -> None:
    spec = job("pss")
    assert names.hostnames(spec, "jobset")["worker-2"] == "digits-pss-worker-0-2.digits-pss"
    assert names.hostnames(spec, "jobs")["ps-1"] == "digits-pss-ps-1.digits-pss"
    assert names.addresses(spec, "jobs")["chief-0"] == "digits-pss-chief-0.digits-pss:2345"
    (js,) = [o for o in _objects("pss", "jobset") if o["kind"] == "JobSet"]
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": "digits-pss"}
    jobs = [o for o in _objects("pss", "jobs") if o["kind"] == "Job"]
    assert {j["spec"]["template"]["spec"]["subdomain"] for j in jobs} == {"digits-pss"}
    (svc,) = [o for o in _objects("pss", "jobs") if o["kind"] == "Service"]
    assert svc["metadata"]["name"] == "digits-pss" and svc["spec"]["clusterIP"] == "None"


def test_user_strings_stay_literal_on_kubernetes() -> None:
    envs = _pods("jobset", "pss")
    assert envs["worker-1"]["LITERAL"] == "$(HOME)"


# -- policies -----------------------------------------------------------------------


def test_jobset_policies() -> None:
    (js,) = [o for o in _objects("pss", "jobset") if o["kind"] == "JobSet"]
    assert js["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief"]}
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 3
    rule = js["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"][0]
    assert rule["onExitCodes"]["values"] == list(range(1, 128))
    (mw,) = [o for o in _objects("mwms", "jobset") if o["kind"] == "JobSet"]
    assert mw["spec"]["successPolicy"]["targetReplicatedJobs"] == ["worker"]
    assert mw["spec"]["failurePolicy"] == {"maxRestarts": 2}
    assert mw["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] == 0
    (aw,) = [o for o in _objects("pss-allworkers", "jobset") if o["kind"] == "JobSet"]
    assert aw["spec"]["successPolicy"]["targetReplicatedJobs"] == ["chief", "worker"]
    worker = next(r for r in aw["spec"]["replicatedJobs"] if r["name"] == "worker")
    assert worker["template"]["spec"]["backoffLimit"] == 5
    assert worker["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    (one,) = [o for o in _objects("single", "jobset") if o["kind"] == "JobSet"]
    assert one["spec"]["failurePolicy"] == {"maxRestarts": 0}
    # the evaluator restarts alone, on its own budget: never the group, even under exit-code
    evaluator = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == "evaluator")["template"]["spec"]
    assert evaluator["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert evaluator["backoffLimit"] == 3 and "podFailurePolicy" not in evaluator
    # training never restarts: an evaluator that may restart does not give the set a budget
    quiet = job("single", roles={"chief": 1, "evaluator": {"replicas": 1, "restart": "on-failure"}},
                restart={"policy": "never", "max_restarts": 3})
    (js1,) = [o for o in manifests.render(quiet, "jobset") if o["kind"] == "JobSet"]
    assert js1["spec"]["failurePolicy"] == {"maxRestarts": 0}
    evaluator = next(r for r in js1["spec"]["replicatedJobs"] if r["name"] == "evaluator")["template"]["spec"]
    assert evaluator["backoffLimit"] == 3


def test_tfjob_policies() -> None:
    (tj,) = [o for o in _objects("pss", "tfjob") if o["kind"] == "TFJob"]
    assert set(tj["spec"]["tfReplicaSpecs"]) == {"Chief", "Worker", "PS", "Evaluator"}
    assert tj["spec"]["runPolicy"] == {
        "backoffLimit": 3,
        "cleanPodPolicy": "Running",
        "activeDeadlineSeconds": 1800,
    }
    worker = tj["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "ExitCode" and worker["replicas"] == 3
    main = worker["template"]["spec"]["containers"][0]
    assert main["name"] == "tensorflow"
    assert main["ports"] == [{"name": "tfjob-port", "containerPort": 2345, "protocol": "TCP"}]
    assert "TF_CONFIG" not in {e["name"] for e in main["env"]}  # the operator writes it
    assert main["resources"] == {
        "requests": {"cpu": "500m", "memory": "2Gi"},
        "limits": {"memory": "2Gi", "nvidia.com/gpu": 1},
    }
    env = pod_env(main, labels={"training.kubeflow.org/replica-index": "2"})
    assert env["TFDIST_TASK"] == "worker-2"
    (aw,) = [o for o in _objects("pss-allworkers", "tfjob") if o["kind"] == "TFJob"]
    assert aw["spec"]["successPolicy"] == "AllWorkers"


def test_network_policy_guards_only_the_grpc_port() -> None:
    (np,) = [o for o in _objects("pss", "jobs") if o["kind"] == "NetworkPolicy"]
    own, others = np["spec"]["ingress"]
    assert np["spec"]["podSelector"] == {"matchLabels": {"tfdist.io/job": "digits-pss"}}
    assert own["from"] == [{"podSelector": {"matchLabels": {"tfdist.io/job": "digits-pss"}}}]
    assert own["ports"] == [{"protocol": "TCP", "port": 2345}]
    assert "from" not in others  # from anywhere: every other port stays as it was
    ranges = [(p["protocol"], p["port"], p["endPort"]) for p in others["ports"]]
    assert ranges == [("TCP", 1, 2344), ("TCP", 2346, 65535), ("UDP", 1, 65535), ("SCTP", 1, 65535)]


def test_everything_in_the_namespace_with_labels() -> None:
    for mode in names.MODES:
        for obj in _objects("pss", mode):
            assert obj["metadata"]["namespace"] == "ml"
            assert obj["metadata"]["labels"]["team"] == "vision"
            assert obj["metadata"]["labels"]["tfdist.io/job"] == "digits-pss"


# -- names --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", names.MODES)
def test_longest_name_fits_for_1000_replicas(mode: str) -> None:
    limit = names.max_name_length(mode)
    name = "a" * limit
    spec = job("mwms", name=name, roles={"worker": 1000, "evaluator": 1})
    objs = manifests.render(spec, mode)
    suffix = len("-abcde") if mode == "jobset" else 0  # JobSet's webhook checks pod names
    for host in names.hostnames(spec, mode).values():
        assert len(host.split(".")[0]) + suffix <= 63
    for obj in objs:
        assert len(obj["metadata"]["name"]) <= 63
        if obj["kind"] not in CRD_KINDS:
            validate_core(obj, K8S_VERSIONS[0])
    too_long = job("mwms", name=name + "b")
    with pytest.raises(SpecError, match=f"maximum is {limit}"):
        manifests.render(too_long, mode)


def test_bad_input_is_one_line_spec_error() -> None:
    with pytest.raises(SpecError, match="kubernetes.image"):
        manifests.render(job("mwms", kubernetes={}), "jobset")
    with pytest.raises(SpecError, match="start with a letter"):
        manifests.render(job("mwms", name="1job"), "jobs")
    with pytest.raises(SpecError, match="--as: unknown form 'helm'"):
        manifests.render(job("mwms"), "helm")
    roles = {"worker": {"replicas": 2, "resources": {"memory": "2GB"}}}
    with pytest.raises(SpecError, match=r"roles.worker.resources.memory: not a memory size.*'2GB'"):
        manifests.render(job("mwms", roles=roles), "jobs")  # the job spec refuses it, for every backend
    k8s = {"image": "x", "labels": {"team": "a b"}}
    with pytest.raises(SpecError, match="kubernetes.labels.team"):
        manifests.render(job("mwms", kubernetes=k8s), "jobs")


def test_to_yaml_is_plain_multi_document() -> None:
    text = manifests.to_yaml(_objects("pss", "jobset"))
    assert "&id" not in text and "*id" not in text
    assert text.count("\n---\n") == 1


def test_task_pod_for_the_supervised_run() -> None:
    spec = job("pss")
    addresses = names.addresses(spec, "pods")
    task: Task = next(t for t in cluster.plan(spec, addresses, run_dir="/local/run") if t.name == "worker-1")
    pod = supervised.task_pod(spec, task, 2, "run1")
    validate_core(pod, K8S_VERSIONS[0])
    validate_core(pod, K8S_VERSIONS[1])
    assert pod["metadata"]["name"] == "digits-pss-worker-1-a2"
    assert pod["spec"]["hostname"] == "digits-pss-worker-1"
    assert pod["spec"]["subdomain"] == "digits-pss"
    assert pod["spec"]["restartPolicy"] == "Never"
    objs = supervised.run_objects(spec, "run1")
    env = pod_env(pod["spec"]["containers"][0], config_maps=objs[:1])
    assert env["TFDIST_RUN_DIR"] == "/models"
    assert json.loads(env["TF_CONFIG"])["cluster"]["ps"] == [
        "digits-pss-ps-0.digits-pss:2345",
        "digits-pss-ps-1.digits-pss:2345",
    ]
    for obj in objs:
        validate_core(obj, K8S_VERSIONS[1])
        assert obj["metadata"]["labels"]["tfdist.io/run"] == "run1"
        assert obj["metadata"]["labels"]["tfdist.io/job"] == "digits-pss"  # the run's selector


def test_a_pods_tf_config_is_assembled_from_the_config_map() -> None:
    """The env plan: the cluster map once in the run's ConfigMap, read into TFDIST_CLUSTER
    before TF_CONFIG refers to it; what the task reads equals the local backend's TF_CONFIG
    and env (but the run directory), and user values with ``$`` stay literal."""
    spec = job("pss", env={"LITERAL": "$(HOME)", "PRICE": "$$5", "SHELLISH": "$HOME"})
    addresses = names.addresses(spec, "pods")
    (config_map, *_) = supervised.run_objects(spec, "Run_1")
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == "run-1-cluster"
    assert json.loads(config_map["data"]["cluster"]) == cluster.cluster_map(spec, addresses)
    for task in cluster.plan(spec, addresses, run_dir="/local/run", restart_counts={"worker-1": 2}):
        container = supervised.task_pod(spec, task, 0, "Run_1")["spec"]["containers"][0]
        order = [item["name"] for item in container["env"]]
        assert order.index("TFDIST_CLUSTER") < order.index("TF_CONFIG")
        (ref,) = [item for item in container["env"] if item["name"] == "TFDIST_CLUSTER"]
        assert ref["valueFrom"] == {"configMapKeyRef": {"name": "run-1-cluster", "key": "cluster"}}
        assert len(json.dumps(container)) < 2000, "no pod carries the cluster map"
        env = pod_env(container, config_maps=[config_map])
        assert env.pop("TFDIST_CLUSTER") == config_map["data"]["cluster"]
        assert env == {**task.env, "TFDIST_RUN_DIR": "/models"}
        assert env["LITERAL"] == "$(HOME)" and env["PRICE"] == "$$5" and env["SHELLISH"] == "$HOME"


def test_a_tf_config_of_the_users_own_stays_literal_without_the_config_map() -> None:
    spec = job("single", env={"TF_CONFIG": '{"cluster":$(X)}'})
    (task,) = cluster.plan(spec, names.addresses(spec, "pods"), run_dir="/r")
    container = supervised.task_pod(spec, task, 0, "run1")["spec"]["containers"][0]
    assert "TFDIST_CLUSTER" not in [item["name"] for item in container["env"]]
    assert pod_env(container)["TF_CONFIG"] == '{"cluster":$(X)}'


def test_a_cluster_map_over_a_config_maps_limit_is_refused_up_front() -> None:
    spec = job("pss")
    size = len(json.dumps(cluster.cluster_map(spec, names.addresses(spec, "pods")), separators=(",", ":")))
    supervised.cluster_config_map(spec, "run1", limit=size + len("cluster"))
    with pytest.raises(SpecError, match=r"^roles: 7 tasks make a cluster map .* over the \d+ bytes a Kubernetes ConfigMap"):
        supervised.cluster_config_map(spec, "run1", limit=size + len("cluster") - 1)


# -- the shipped workdir (kubernetes.ship_workdir) ------------------------------------


def _workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("import pkg.util\nprint('trained', pkg.util.VALUE)\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "util.py").write_text("VALUE = 42\n")
    (root / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "run.sh").chmod(0o755)
    for skipped in (".git", "__pycache__", ".venv"):
        (root / skipped).mkdir()
        (root / skipped / "big").write_bytes(b"x" * 10)
    return root


def test_the_workdir_packs_the_same_bytes_and_the_unpacker_runs_the_command_there(tmp_path: Path) -> None:
    import io
    import subprocess
    import sys
    import tarfile

    from tfdist.backends.k8s import workdir

    root = _workdir(tmp_path)
    shipped = job("single", workdir=str(root))
    archive = workdir.pack(shipped)
    os.utime(root / "train.py", (1, 1))  # times and the walk's order do not change the bytes
    assert workdir.pack(shipped) == archive
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["pkg/__init__.py", "pkg/util.py", "run.sh", "train.py"]
    assert members["run.sh"].mode == 0o755 and members["train.py"].mode == 0o644
    assert {(m.mtime, m.uid, m.gid, m.uname) for m in members.values()} == {(0, 0, 0, "")}
    # the pod's unpacker, pointed at this test's directories instead of /tfdist/...
    (tmp_path / "archive").mkdir()
    (tmp_path / "archive" / tfjob.WORKDIR_KEY).write_bytes(archive)
    unpack = tfjob.WORKDIR_UNPACK.replace(tfjob.WORKDIR_ARCHIVE_DIR, str(tmp_path / "archive")).replace(
        tfjob.WORKDIR_MOUNT, str(tmp_path / "unpacked"))
    assert unpack != tfjob.WORKDIR_UNPACK
    (tmp_path / "unpacked").mkdir()
    command = workdir.command([sys.executable, "train.py"])
    assert command[:3] == [sys.executable, "-c", tfjob.WORKDIR_UNPACK]
    done = subprocess.run([command[0], "-c", unpack, *command[3:]], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "trained 42\n", done.stderr
    done = subprocess.run([sys.executable, "-c", unpack, "./run.sh"], capture_output=True, text=True, timeout=60)
    assert done.stdout == "ran\n", done.stderr  # the executable bit survived
    assert workdir.command(["./run.sh"])[0] == "python3"  # no python in the command: python3


def test_shipping_refusals_are_one_line(tmp_path: Path) -> None:
    from tfdist.backends.k8s import workdir

    root = _workdir(tmp_path)
    (root / "noise.bin").write_bytes(os.urandom(workdir.LIMIT + 1))
    with pytest.raises(SpecError) as err:
        manifests.render(job("single", workdir=str(root)), "jobs")
    said = str(err.value)
    assert "\n" not in said and said.startswith("kubernetes.ship_workdir: the workdir ")
    assert "set kubernetes.ship_workdir: false" in said, said
    both = job("single", workdir=str(root), kubernetes={"image": "x", "ship_workdir": True, "working_dir": "/app"})
    with pytest.raises(SpecError, match=r"^kubernetes.ship_workdir: true unpacks the workdir into a directory"):
        manifests.render(both, "jobs")
    # a working directory of the image ships nothing by default, nor does ship_workdir: false
    for kubernetes in ({"image": "x", "working_dir": "/app"}, {"image": "x", "ship_workdir": False}):
        objs = manifests.render(job("single", workdir=str(root), kubernetes=kubernetes), "jobs")
        assert "ConfigMap" not in [o["kind"] for o in objs] and "tarfile" not in json.dumps(objs)

"""Kubeflow TFJob manifests as job files: mapping, round trip, one-line errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backends.k8s.k8s_helpers import IMAGE, JOBS, ROOT, job, validate_crd
from tfdist.backends.k8s import manifests, names
from tfdist.errors import SpecError
from tfdist.jobspec import load, model
from tfdist.jobspec.tfjob import LEAVE_PATH, to_job_dict

EXAMPLE = ROOT / "examples" / "k8s" / "tfjob-digits.yaml"

KUBEFLOW_STYLE = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: dist-mnist
  labels: {team: vision}
spec:
  successPolicy: AllWorkers
  runPolicy: {backoffLimit: 4, activeDeadlineSeconds: 600, cleanPodPolicy: None}
  tfReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-dist-mnist-test:1.0
            command: [python, /var/tf_dist_mnist/dist_mnist.py]
            args: [--train_steps=100]
            env:
            - {name: DATA_DIR, value: /data}
            - {name: OUT, value: $(DATA_DIR)/out}
            - {name: PRICE, value: $$5}
    Worker:
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-dist-mnist-test:1.0
            command: [python, /var/tf_dist_mnist/dist_mnist.py]
            args: [--train_steps=100]
            env:
            - {name: DATA_DIR, value: /data}
            - {name: OUT, value: $(DATA_DIR)/out}
            - {name: PRICE, value: $$5}
            resources:
              limits: {nvidia.com/gpu: "1", cpu: "2", memory: 4Gi}
    PS:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-dist-mnist-test:1.0
            command: [python, /var/tf_dist_mnist/dist_mnist.py]
            args: [--train_steps=100]
            env:
            - {name: DATA_DIR, value: /data}
            - {name: OUT, value: $(DATA_DIR)/out}
            - {name: PRICE, value: $$5}
"""


def _load(text: str, tmp_path: Path, overrides: list[str] | None = None) -> model.JobSpec:
    path = tmp_path / "tfjob.yaml"
    path.write_text(text)
    return load.from_file(path, overrides)


def test_kubeflow_manifest_maps_to_a_job(tmp_path: Path) -> None:
    job_ = _load(KUBEFLOW_STYLE, tmp_path)
    assert job_.name == "dist-mnist"
    assert job_.strategy == "parameter_server"
    assert {r: job_.replicas(r) for r in ("chief", "worker", "ps")} == {
        "chief": 1,
        "worker": 2,
        "ps": 1,
    }
    assert job_.command_for("worker") == [
        "python",
        "/var/tf_dist_mnist/dist_mnist.py",
        "--train_steps=100",
    ]
    # what the process would see on Kubernetes: $(VAR) expanded, $$ unescaped
    assert job_.env == {"DATA_DIR": "/data", "OUT": "/data/out", "PRICE": "$5"}
    assert job_.restart_policy_for("chief") == "exit-code"
    assert job_.restart_policy_for("ps") == "never"
    assert job_.restart.max_restarts == 4
    assert job_.deadline_seconds == 600
    assert job_.success == "all-workers"
    worker = job_.role("worker").resources
    assert (worker.gpus, worker.cpus, worker.memory) == (1, 2.0, "4Gi")
    assert job_.kubernetes.image == "kubeflow/tf-dist-mnist-test:1.0"
    assert job_.kubernetes.labels == {"team": "vision"}
    assert job_.workdir == str(tmp_path)


def test_overrides_apply_to_a_tfjob(tmp_path: Path) -> None:
    job_ = _load(KUBEFLOW_STYLE, tmp_path, ["roles.worker.replicas=3"])
    assert job_.replicas("worker") == 3


def test_example_file_loads_and_renders() -> None:
    job_ = load.from_file(EXAMPLE)
    assert job_.strategy == "multi_worker_mirrored"
    assert job_.command == ["python", "../digits/train_fit.py", "--epochs", "2"]
    assert job_.env == {"TF_CPP_MIN_LOG_LEVEL": "2"}
    assert job_.restart.policy == "on-failure" and job_.restart.max_restarts == 2
    assert job_.kubernetes.namespace == "ml"
    assert job_.kubernetes.working_dir == "/app/examples/k8s"
    assert (ROOT / "examples" / "digits" / "train_fit.py").exists()
    for mode in names.MODES:
        objs = manifests.render(job_, mode)
        containers = [c for c in _walk(objs) if isinstance(c, dict) and c.get("name") == "tensorflow"]
        assert containers and all(c["workingDir"] == "/app/examples/k8s" for c in containers), mode
    # and a rendered TFJob reads back with the same working directory
    (tj,) = [o for o in manifests.render(job_, "tfjob") if o["kind"] == "TFJob"]
    assert load.from_dict(to_job_dict(tj, "rendered"), "rendered").kubernetes.working_dir == "/app/examples/k8s"


def _walk(node: Any) -> list[Any]:
    """Every dict and list inside ``node``, depth first."""
    found = [node]
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        found += _walk(child)
    return found


@pytest.mark.parametrize("name", JOBS)
def test_round_trip_through_a_rendered_tfjob(name: str) -> None:
    """job -> TFJob -> job renders the same objects in every form."""
    original = job(name)
    (tj,) = [o for o in manifests.render(original, "tfjob") if o["kind"] == "TFJob"]
    validate_crd(tj)
    # the TFJob does not say where the workdir is (a job file's place does): as the original's
    again = load.from_dict({**to_job_dict(copy.deepcopy(tj), "rendered"), "workdir": original.workdir}, "rendered")
    for mode in names.MODES:
        assert manifests.render(again, mode) == manifests.render(original, mode), mode
    for field in ("strategy", "env", "restart", "success", "legacy_keras", "options"):
        assert getattr(again, field) == getattr(original, field), field
    for role in original.roles:
        assert again.command_for(role) == original.command_for(role)
        assert again.role(role).resources == original.role(role).resources


def test_a_rendered_mwms_tfjob_reads_back_its_command_and_drain_from_the_leave_program() -> None:
    """The chief's and workers' command runs through tfdist's leave program with the job's
    drain (LEAVE_PATH SECONDS); read back, the job has its own command and that drain, and a
    hand-edited or mismatched number is one line naming the field (the read-back above
    would otherwise wrap the program in itself)."""
    original = job("mwms", drain_seconds=45, roles={"chief": 1, "worker": 2})
    (tj,) = [o for o in manifests.render(original, "tfjob") if o["kind"] == "TFJob"]
    commands = {kind: spec["template"]["spec"]["containers"][0]["command"]
                for kind, spec in tj["spec"]["tfReplicaSpecs"].items()}
    for command in commands.values():
        at = command.index(LEAVE_PATH)
        assert command[at + 1] == "45" and command[at + 2:] == original.command_for("worker")[1:]
    again = load.from_dict({**to_job_dict(copy.deepcopy(tj), "t.yaml"), "workdir": original.workdir}, "t.yaml")
    assert sorted(commands) == ["Chief", "Worker"]
    assert again.drain_seconds == 45 and again.command_for("worker") == original.command_for("worker")

    def bad(kind: str, seconds: str) -> str:
        data = copy.deepcopy(tj)
        command = data["spec"]["tfReplicaSpecs"][kind]["template"]["spec"]["containers"][0]["command"]
        command[command.index(LEAVE_PATH) + 1] = seconds
        with pytest.raises(SpecError) as err:
            load.from_dict({**to_job_dict(data, "t.yaml"), "workdir": original.workdir}, "t.yaml")
        assert "\n" not in str(err.value)
        return str(err.value)

    for seconds in ("soon", "-1", "nan", "inf"):
        assert "containers[tensorflow].command" in bad("Worker", seconds), seconds
    assert "differ between replica types" in bad("Worker", "46")


def _manifest() -> dict[str, Any]:
    return yaml.safe_load(KUBEFLOW_STYLE)


def _bad(change: Any) -> str:
    data = _manifest()
    change(data)
    with pytest.raises(SpecError) as err:
        load.from_dict(to_job_dict(data, "tfjob.yaml"), "tfjob.yaml")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("tfjob.yaml: ")
    return message


def _worker(data: dict[str, Any]) -> dict[str, Any]:
    return data["spec"]["tfReplicaSpecs"]["Worker"]


def _container(data: dict[str, Any]) -> dict[str, Any]:
    return _worker(data)["template"]["spec"]["containers"][0]


def test_invalid_manifests_name_the_field() -> None:
    assert "apiVersion" in _bad(lambda d: d.update(apiVersion="kubeflow.org/v2"))
    assert "metadata.name" in _bad(lambda d: d["metadata"].pop("name"))
    assert "spec.tfReplicaSpecs" in _bad(lambda d: d["spec"].update(tfReplicaSpecs={}))
    assert "spec.tfReplicaSpecs.Launcher: unknown replica type" in _bad(
        lambda d: d["spec"]["tfReplicaSpecs"].update(Launcher=_worker(d))
    )
    assert "a second chief" in _bad(lambda d: d["spec"]["tfReplicaSpecs"].update(Chief=_worker(d)))
    assert "Worker.replicas: expected a whole number" in _bad(lambda d: _worker(d).update(replicas="two"))
    assert "Worker.replicas: must be 0 or more" in _bad(lambda d: _worker(d).update(replicas=-1))
    assert "Worker.restartPolicy" in _bad(lambda d: _worker(d).update(restartPolicy="Sometimes"))
    assert "no container named 'tensorflow'" in _bad(lambda d: _container(d).update(name="main"))
    assert "env[SECRET].valueFrom" in _bad(
        lambda d: _container(d)["env"].append({"name": "SECRET", "valueFrom": {"x": 1}})
    )
    assert "tfdist uses one imagePullPolicy" in _bad(lambda d: _container(d).update(imagePullPolicy="Always"))
    assert "containers[tensorflow].args[0]: true is read as a boolean" in _bad(
        lambda d: _container(d).update(args=[True])
    )
    assert "env[1].name: '' is no environment variable name" in _bad(
        lambda d: _container(d)["env"][1].update(name="")
    )
    assert "env[OUT].value: is a list" in _bad(lambda d: _container(d)["env"][1].update(value=["x"]))
    assert "spec.runPolicy.cleanPodPolicy" in _bad(lambda d: d["spec"]["runPolicy"].update(cleanPodPolicy="Some"))
    assert "spec.runPolicy.backoffLimit" in _bad(lambda d: d["spec"]["runPolicy"].update(backoffLimit=-2))
    assert "spec.successPolicy" in _bad(lambda d: d["spec"].update(successPolicy="AnyWorker"))
    assert "resources.cpu" in _bad(lambda d: _container(d)["resources"]["limits"].update(cpu="lots"))


def test_invalid_job_after_mapping_is_still_one_line() -> None:
    """What the mapping accepts but the job spec rejects (ps without parameter_server)."""
    message = _bad(lambda d: d["metadata"].update(name="Dist_MNIST"))
    assert "name:" in message


def _load_refused(data: dict[str, Any], tmp_path: Path) -> str:
    with pytest.raises(SpecError) as err:
        _load(yaml.safe_dump(data), tmp_path)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_messages_for_a_tfjob_name_its_fields(tmp_path: Path) -> None:
    """The job spec's own refusals, renamed to the manifest's fields."""
    data = _manifest()
    data["spec"]["tfReplicaSpecs"]["Master"]["replicas"] = 2
    assert "spec.tfReplicaSpecs.Master.replicas: a job has at most one chief" in _load_refused(data, tmp_path)
    data = _manifest()
    data["spec"]["runPolicy"]["activeDeadlineSeconds"] = 10**9
    assert "spec.runPolicy.activeDeadlineSeconds: at most 2,592,000 seconds" in _load_refused(data, tmp_path)
    data = _manifest()
    data["metadata"]["name"] = "Dist_MNIST"
    assert "metadata.name: use lower-case" in _load_refused(data, tmp_path)
    data = _manifest()
    _worker(data)["replicas"] = 5000
    assert "spec.tfReplicaSpecs: 5,002 tasks is more than one job may have" in _load_refused(data, tmp_path)


def _render(job_: model.JobSpec, mode: str) -> dict[str, Any]:
    (obj,) = [o for o in manifests.render(job_, mode) if o["kind"] not in ("NetworkPolicy", "ConfigMap")][:1]
    return obj


def _containers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The main container of each role of a rendered TFJob or JobSet, by role."""
    if obj["kind"] == "TFJob":
        specs = obj["spec"]["tfReplicaSpecs"]
        return {k: v["template"]["spec"]["containers"][0] for k, v in specs.items()}
    return {
        rj["name"]: rj["template"]["spec"]["template"]["spec"]["containers"][0]
        for rj in obj["spec"]["replicatedJobs"]
    }


def test_each_replica_type_keeps_its_own_image(tmp_path: Path) -> None:
    data = _manifest()
    data["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["image"] = "ps-image:2"
    job_ = _load(yaml.safe_dump(data), tmp_path)  # locally the image does not matter at all
    assert job_.kubernetes.image == "kubeflow/tf-dist-mnist-test:1.0"
    assert job_.image_for("ps") == "ps-image:2" and job_.image_for("worker") == job_.kubernetes.image
    tfjob = _render(job_, "tfjob")
    validate_crd(tfjob)
    assert {k: c["image"] for k, c in _containers(tfjob).items()} == {
        "Chief": "kubeflow/tf-dist-mnist-test:1.0", "Worker": "kubeflow/tf-dist-mnist-test:1.0", "PS": "ps-image:2"}
    assert _containers(_render(job_, "jobset"))["ps"]["image"] == "ps-image:2"
    # and the tfdist spec says the same with roles.<role>.kubernetes.image
    native = job("pss", roles={"chief": 1, "worker": 1, "ps": {"replicas": 1, "kubernetes": {"image": "p:1"}}})
    images = {r: c["image"] for r, c in _containers(_render(native, "jobset")).items()}
    assert images == {"chief": IMAGE, "worker": IMAGE, "ps": "p:1"}


NO_COMMAND = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-mnist-with-summaries:latest
            args: [--log_dir=/train/logs, --learning_rate=0.01, --batch_size, 0150]
"""


def test_a_container_without_command_renders_as_is_and_is_refused_locally(tmp_path: Path) -> None:
    job_ = _load(NO_COMMAND, tmp_path)
    main = _containers(_render(job_, "tfjob"))["Worker"]
    assert "command" not in main
    assert main["args"] == ["--log_dir=/train/logs", "--learning_rate=0.01", "--batch_size", "0150"]
    # a rendered TFJob reads back as the same job
    (tj,) = [o for o in manifests.render(job_, "tfjob") if o["kind"] == "TFJob"]
    again = load.from_dict(to_job_dict(tj, "rendered"), "rendered")
    assert (again.roles, again.command, again.strategy) == (job_.roles, job_.command, job_.strategy)
    for mode in ("jobset", "jobs"):
        with pytest.raises(SpecError, match=r"roles.worker: its container has no command.*--set command="):
            manifests.render(job_, mode)
    with pytest.raises(SpecError, match="tfdist does not know it"):
        job_.require_commands()
    from tfdist import api

    with pytest.raises(SpecError, match="has no command"):  # the Python API too, before anything
        api.run(job_, options=api.BackendOptions(runs_root=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()
    given = _load(NO_COMMAND, tmp_path, ["command=[python, mnist.py]"])
    given.require_commands()
    assert given.command_for("worker") == ["python", "mnist.py"]


def test_tf1_ps_and_workers_without_a_chief_run_with_plain_tf_config(tmp_path: Path) -> None:
    data = _manifest()
    del data["spec"]["tfReplicaSpecs"]["Master"]
    job_ = _load(yaml.safe_dump(data), tmp_path)
    assert job_.strategy == "none"
    assert (job_.replicas("worker"), job_.replicas("ps"), job_.has_chief) == (2, 1, False)
    # a manifest that names its strategy keeps it
    assert _load(KUBEFLOW_STYLE, tmp_path).strategy == "parameter_server"


def test_clean_pod_policy_and_restart_policies_survive_a_render(tmp_path: Path) -> None:
    job_ = _load(KUBEFLOW_STYLE, tmp_path)
    tfjob = _render(job_, "tfjob")
    assert tfjob["spec"]["runPolicy"]["cleanPodPolicy"] == "None"
    source = _manifest()["spec"]["tfReplicaSpecs"]
    rendered = tfjob["spec"]["tfReplicaSpecs"]
    assert {"Master": "Chief", "Worker": "Worker", "PS": "PS"}.keys() == source.keys()
    assert [rendered[k]["restartPolicy"] for k in ("Chief", "Worker", "PS")] == [
        source[k]["restartPolicy"] for k in ("Master", "Worker", "PS")]
    # the JobSet of the same manifest agrees: a PS failure (restartPolicy Never) fails the job
    jobset = _render(job_, "jobset")
    validate_crd(jobset)
    rules = jobset["spec"]["failurePolicy"]["rules"]
    assert {"name": "never_restarted", "action": "FailJobSet", "targetReplicatedJobs": ["ps"]} in rules
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == tfjob["spec"]["runPolicy"]["backoffLimit"] == 4
    assert _render(job("mwms"), "tfjob")["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_no_legacy_keras_variable_unless_the_manifest_asked(tmp_path: Path) -> None:
    job_ = _load(KUBEFLOW_STYLE, tmp_path)
    assert job_.legacy_keras is None
    for mode in ("tfjob", "jobset"):  # the image decides on Kubernetes
        for main in _containers(_render(job_, mode)).values():
            assert "TF_USE_LEGACY_KERAS" not in {e["name"] for e in main["env"]}, mode
    # processes here still get legacy Keras (tfdist's environment has tf_keras; MWMS fit needs it)
    from tfdist.cluster import TaskId, task_env

    assert task_env(job_, TaskId("worker", 0), {}, run_dir="r")["TF_USE_LEGACY_KERAS"] == "1"
    data = _manifest()
    for replica in data["spec"]["tfReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["env"].append({"name": "TF_USE_LEGACY_KERAS", "value": "1"})
    asked = _load(yaml.safe_dump(data), tmp_path)
    assert asked.legacy_keras is True
    for main in _containers(_render(asked, "tfjob")).values():
        assert {"name": "TF_USE_LEGACY_KERAS", "value": "1"} in main["env"]
    # the tfdist spec's default stays: legacy Keras on
    assert load.from_dict({"name": "a", "command": "x", "roles": {"worker": 1}}).legacy_keras is True


def test_volumes_a_local_run_cannot_provide_warn_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tfdist.cli.parser import build_parser
    from tfdist.cli.run import load_job

    data = _manifest()
    for replica in data["spec"]["tfReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        pod["volumes"] = [{"name": "data", "hostPath": {"path": "/mnt/data"}}]
        pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(data))
    args = build_parser().parse_args(["run", str(path)])
    load_job(args, [])
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1 and "/data" in warnings[0] and "warning" in warnings[0]
    load_job(build_parser().parse_args(["run", str(path), "--backend", "kubernetes"]), [])
    assert capsys.readouterr().err == ""

"""Kubeflow TFJob manifests as job files: mapping, round trip, one-line errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.k8s_helpers import JOBS, ROOT, job, validate_crd
from tfdist import spec
from tfdist.backends.k8s import manifests, names
from tfdist.errors import SpecError
from tfdist.tfjob import tfjob_to_dict

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


def _load(text: str, tmp_path: Path, overrides: list[str] | None = None) -> spec.JobSpec:
    path = tmp_path / "tfjob.yaml"
    path.write_text(text)
    return spec.load(path, overrides)


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
    job_ = spec.load(EXAMPLE)
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
    assert spec.from_dict(tfjob_to_dict(tj, "rendered"), "rendered").kubernetes.working_dir == "/app/examples/k8s"


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
    again = spec.from_dict(tfjob_to_dict(copy.deepcopy(tj), "rendered"), "rendered")
    for mode in names.MODES:
        assert manifests.render(again, mode) == manifests.render(original, mode), mode
    for field in ("strategy", "env", "restart", "success", "legacy_keras", "options"):
        assert getattr(again, field) == getattr(original, field), field
    for role in original.roles:
        assert again.command_for(role) == original.command_for(role)
        assert again.role(role).resources == original.role(role).resources


def _manifest() -> dict[str, Any]:
    return yaml.safe_load(KUBEFLOW_STYLE)


def _bad(change: Any) -> str:
    data = _manifest()
    change(data)
    with pytest.raises(SpecError) as err:
        spec.from_dict(tfjob_to_dict(data, "tfjob.yaml"), "tfjob.yaml")
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
    assert "containers[tensorflow].command" in _bad(
        lambda d: (_container(d).pop("command"), _container(d).pop("args"))
    )
    assert "env[SECRET].valueFrom" in _bad(
        lambda d: _container(d)["env"].append({"name": "SECRET", "valueFrom": {"x": 1}})
    )
    assert "one image for every replica type" in _bad(lambda d: _container(d).update(image="x:2"))
    assert "spec.runPolicy.backoffLimit" in _bad(lambda d: d["spec"]["runPolicy"].update(backoffLimit=-2))
    assert "spec.successPolicy" in _bad(lambda d: d["spec"].update(successPolicy="AnyWorker"))
    assert "resources.cpu" in _bad(lambda d: _container(d)["resources"]["limits"].update(cpu="lots"))


def test_invalid_job_after_mapping_is_still_one_line() -> None:
    """What the mapping accepts but the job spec rejects (ps without parameter_server)."""
    message = _bad(lambda d: d["metadata"].update(name="Dist_MNIST"))
    assert "name:" in message


@pytest.mark.integration
def test_tfjob_example_runs_locally_as_processes(tmp_path: Path) -> None:
    """A cluster job debugged on a laptop: the TFJob file runs as a real local TF cluster."""
    import json
    import subprocess
    import sys

    pytest.importorskip("tensorflow", reason="the example trains with TensorFlow")
    tfdist = Path(sys.executable).parent / "tfdist"
    cmd = [str(tfdist), "run", "--quiet", "--json", "--runs-dir", str(tmp_path / "runs")]
    sets = ["--set", 'command=[python, ../digits/train_fit.py, --epochs, "2"]']
    out = subprocess.run([*cmd, str(EXAMPLE), *sets], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    assert summary["state"] == "succeeded"
    assert sorted(t["name"] for t in summary["tasks"]) == ["chief-0", "worker-0", "worker-1"]
    assert summary["metrics"]["accuracy"] > 0.6  # it learned (chance is 0.1)
    run_dir = Path(summary["run_dir"])
    saved = {p.parent for p in run_dir.rglob("saved_model.pb")}
    assert saved == {run_dir / "model"}  # only the chief's model, no worker's temp copy

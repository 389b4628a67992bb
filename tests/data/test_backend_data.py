"""What each backend takes of a data plan: the ones that stage where tasks run take all of it;
Kubernetes takes streamed inputs given whole and refuses the rest in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfdist.backends.base import Backend
from tfdist.backends.local import LocalBackend
from tfdist.data import plan as data_plan
from tfdist.errors import SpecError
from tfdist.jobspec.load import from_dict


def job(tmp_path: Path, data: dict, outputs: dict | None = None):
    d = tmp_path / "clicks"
    d.mkdir(exist_ok=True)
    for i in range(2):
        (d / f"part-{i}").write_text("x" * (i + 1))
    return from_dict({"name": "k", "command": "python t.py", "workdir": str(tmp_path), "roles": {"worker": 2},
                      "data": data, "outputs": outputs or {}})


def test_the_process_backends_stage() -> None:
    from tfdist.backends.agent.backend import AgentBackend
    from tfdist.backends.ray.driver import RayBackend

    assert LocalBackend.stages_data and AgentBackend.stages_data and RayBackend.stages_data
    assert not Backend.stages_data


def test_kubernetes_takes_streamed_inputs_given_whole(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes", reason="the kubernetes client is an optional dependency")
    from tfdist.backends.k8s.backend import KubernetesBackend

    j = job(tmp_path, {"raw": {"uris": ["clicks"], "mode": "stream", "shard": "none"}})
    backend = KubernetesBackend(j)
    plan = data_plan.make(j)
    assert plan is not None
    backend.use_data(plan)
    assert json.loads(backend.job.env["TFDIST_DATA_RAW"]) == [str(tmp_path / "clicks" / f"part-{i}")
                                                               for i in range(2)]


@pytest.mark.parametrize(("data", "outputs", "message"), [
    ({"train": {"uris": ["clicks"]}}, {}, "data.train: the kubernetes backend takes mode: stream with shard: none"),
    ({"train": {"uris": ["clicks"], "mode": "stream"}}, {}, "data.train: the kubernetes backend takes"),
    ({}, {"model_dir": "out"}, "outputs: the kubernetes backend cannot copy outputs"),
])
def test_kubernetes_refuses_the_rest_in_one_line(tmp_path: Path, data: dict, outputs: dict, message: str) -> None:
    pytest.importorskip("kubernetes", reason="the kubernetes client is an optional dependency")
    from tfdist.backends.k8s.backend import KubernetesBackend

    j = job(tmp_path, data, outputs)
    plan = data_plan.make(j)
    assert plan is not None
    with pytest.raises(SpecError) as err:
        KubernetesBackend(j).use_data(plan)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_backend_that_cannot_stage_refuses_staging(tmp_path: Path) -> None:
    class Streams(LocalBackend):
        stages_data = False

    j = job(tmp_path, {"train": {"uris": ["clicks"]}})
    plan = data_plan.make(j)
    assert plan is not None
    with pytest.raises(SpecError, match="data: mode: stage: the local backend cannot stage inputs"):
        Streams(j).use_data(plan)

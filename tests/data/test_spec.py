"""The job file's data and outputs sections: what is accepted, round-trips, and what is
refused in one line naming the field."""

from __future__ import annotations

import pytest

from tfdist.errors import SpecError
from tfdist.jobspec.load import from_dict
from tfdist.jobspec.model import DATA_SCHEMES, JobSpec
from tfdist.node import stores

BASE = {"name": "ctr", "command": "python train.py", "roles": {"worker": 2}}


def job(**extra: object) -> JobSpec:
    return from_dict({**BASE, **extra})


def test_the_contract_shape_loads_and_round_trips() -> None:
    j = job(data={"train": {"uris": ["hdfs://nn:9870/clicks/part-*"], "shard": "file", "mode": "stage"},
                  "vocab": {"uris": ["/shared/vocab.txt"], "shard": "none"}},
            outputs={"model_dir": "hdfs://nn:9870/models/ctr"})
    assert j.data["train"].shard == "file" and j.data["train"].mode == "stage"
    assert j.data["vocab"].shard == "none" and j.data["vocab"].mode == "stage"  # the default
    assert j.outputs == {"model_dir": "hdfs://nn:9870/models/ctr"}
    assert JobSpec.build(j.to_dict()) == j
    assert from_dict(j.to_dict()) == j
    dumped = j.to_dict()
    assert dumped["data"]["train"] == {"uris": ["hdfs://nn:9870/clicks/part-*"]}  # defaults left out


def test_one_uri_may_be_a_string() -> None:
    assert job(data={"vocab": {"uris": "/v.txt"}}).data["vocab"].uris == ["/v.txt"]


def test_the_schemes_the_spec_accepts_are_those_a_store_handles() -> None:
    assert DATA_SCHEMES == stores.SCHEMES


@pytest.mark.parametrize(("extra", "message"), [
    ({"data": {"Train": {"uris": ["/x"]}}}, "data: 'Train' is no name"),
    ({"data": {"1x": {"uris": ["/x"]}}}, "data: '1x' is no name"),
    ({"data": {"a-b": {"uris": ["/x"]}}}, "data: 'a-b' is no name"),
    ({"data": {"t": {"uris": []}}}, "data.t: uris: give at least one"),
    ({"data": {"t": {"uris": [""]}}}, "data.t: uris.0: an empty path"),
    ({"data": {"t": {}}}, "data.t.uris: Field required"),
    ({"data": {"t": {"uris": ["s3://bucket/x"]}}}, "no store handles s3://"),
    ({"data": {"t": {"uris": ["hdfs://nn"]}}}, "'hdfs://nn' has no path"),
    ({"data": {"t": {"uris": ["/x"], "shard": "row"}}}, "data.t.shard: Input should be 'file' or 'none'"),
    ({"data": {"t": {"uris": ["/x"], "mode": "copy"}}}, "data.t.mode: Input should be 'stage' or 'stream'"),
    ({"data": {"t": {"uris": ["/x"], "shards": "file"}}}, "unknown key 'shards' in data.t; did you mean 'shard'"),
    ({"outputs": {"model_dir": ""}}, "outputs.model_dir: an empty path"),
    ({"outputs": {"Model": "/m"}}, "outputs: 'Model' is no name"),
    ({"outputs": {"model_dir": "/m/*"}}, "outputs.model_dir: '/m/*' is a pattern"),
    ({"outputs": {"model_dir": "gs://b/m"}}, "no store handles gs://"),
])
def test_bad_sections_are_one_line_naming_the_field(extra: dict, message: str) -> None:
    with pytest.raises(SpecError) as err:
        job(**extra)
    text = str(err.value)
    assert message in text and "\n" not in text


def test_set_reaches_an_input(tmp_path) -> None:
    from tfdist.jobspec.load import from_file

    path = tmp_path / "job.yaml"
    path.write_text("name: ctr\ncommand: python t.py\nroles: {worker: 1}\n"
                    "data:\n  train: {uris: [/a]}\n")
    j = from_file(path, ["data.train.mode=stream", "outputs.model_dir=/m"])
    assert j.data["train"].mode == "stream" and j.outputs == {"model_dir": "/m"}

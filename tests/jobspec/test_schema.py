"""tfdist.jobspec.schema: records are valid from the moment they exist, whatever builds them."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pytest

from tfdist.jobspec import load, model
from tfdist.jobspec.schema import Invalid, Record, convert, rules


def test_direct_construction_and_replace_are_checked() -> None:
    with pytest.raises(Invalid) as err:
        model.RoleSpec(replicas=-1)
    assert err.value.path == ("replicas",) and "greater than or equal to 0" in err.value.message
    job = load.quick(["x"], workers=2)
    with pytest.raises(Invalid) as err:
        dataclasses.replace(job, restart=model.RestartSpec(policy="sometimes"))  # type: ignore[arg-type]
    assert err.value.path == ("policy",)
    with pytest.raises(Invalid, match="at most one chief"):
        dataclasses.replace(job, roles={"chief": model.RoleSpec(replicas=2), "worker": model.RoleSpec()})
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.name = "other"  # type: ignore[misc]


def test_nested_mappings_are_built_and_paths_name_the_field() -> None:
    options = model.StrategyOptions(partition={"min_shard_bytes": 1024})  # type: ignore[arg-type]
    assert options.partition == model.PartitionSpec(min_shard_bytes=1024)
    with pytest.raises(Invalid) as err:
        model.JobSpec.build({"name": "a", "command": ["x"], "roles": {"worker": {"env": {"A": 1}}}})
    assert err.value.path == ("roles", "worker", "env", "A") and err.value.kind == "str"
    with pytest.raises(Invalid) as err:
        model.JobSpec.build({"name": "a", "command": ["x"], "roles": {"worker": 1}, "ray": {"pip": ["a", 2]}})
    assert err.value.path == ("ray", "pip", 1)


@pytest.mark.parametrize(
    ("kind", "value"),
    [(int, True), (int, 2.0), (int, "2"), (float, True), (float, "1.5"), (float, float("nan")),
     (bool, 1), (bool, "true"), (str, 3), (Literal[1, 2], True), (Literal["a"], "b"),
     (list[str], "a b"), (dict[str, int], [("a", 1)])],
)
def test_no_silent_coercion(kind: Any, value: Any) -> None:
    """A YAML `true` is no count, `"2"` no number, and NaN no duration."""
    with pytest.raises(Invalid):
        convert(kind, value)


def test_conversions_that_are_safe() -> None:
    assert convert(float, 3) == 3.0 and isinstance(convert(float, 3), float)
    assert convert(int | None, None) is None
    assert convert(list[int], (1, 2)) == [1, 2]


def test_unknown_and_missing_keys() -> None:
    with pytest.raises(Invalid) as err:
        model.JobSpec.build({"name": "a", "command": ["x"], "roles": {"worker": 1}, "restrat": {}})
    assert err.value.kind == "extra" and "restart" in err.value.choices
    with pytest.raises(Invalid, match="Field required") as err:
        model.JobSpec.build({"command": ["x"], "roles": {"worker": 1}})
    assert err.value.path == ("name",)
    with pytest.raises(Invalid, match="mapping"):
        model.JobSpec.build(["name", "a"])


def test_dump_leaves_out_defaults_and_round_trips() -> None:
    job = load.quick(["python", "t.py"], workers=3, name="x", workdir="/")
    data = job.to_dict()
    assert data == {"name": "x", "command": ["python", "t.py"], "workdir": "/",
                    "roles": {"worker": {"replicas": 3}}}
    assert model.JobSpec.build(data) == job
    full = job.dump()
    assert full["restart"] == {"policy": "never", "max_restarts": 3, "backoff_seconds": 1.0,
                               "backoff_max_seconds": 30.0, "warm_spares": False}


def test_a_field_type_without_a_check_is_a_programming_error() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Odd(Record):
        when: complex = dataclasses.field(default=1j, metadata=rules())

    with pytest.raises(TypeError, match="no check for fields"):
        Odd()

"""Who gets what: the driver's plan from a job's files, its refusals, and the variables a
task starts with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfdist import contract
from tfdist.data import plan as data_plan
from tfdist.data.resolve import resolve
from tfdist.errors import SpecError
from tfdist.jobspec.load import from_dict
from tfdist.jobspec.model import JobSpec


def make_files(root: Path, sizes: list[int], sub: str = "clicks") -> Path:
    d = root / sub
    d.mkdir(parents=True)
    for i, size in enumerate(sizes):
        (d / f"part-{i}").write_bytes(b"x" * size)
    return d


def job(root: Path, roles: dict, **extra: object) -> JobSpec:
    return from_dict({"name": "ctr", "command": "python t.py", "workdir": str(root), "roles": roles, **extra})


def test_sharded_input_goes_to_chief_and_workers_under_all_reduce(tmp_path: Path) -> None:
    d = make_files(tmp_path, [10, 20, 30, 40, 50, 60])
    j = job(tmp_path, {"chief": 1, "worker": 2, "evaluator": 1},
            data={"train": {"uris": [f"{d}/part-*"]}, "vocab": {"uris": [str(d / "part-0")], "shard": "none"}})
    plan = data_plan.make(j)
    assert plan is not None
    takers = ["chief-0", "worker-0", "worker-1"]
    got = {t: [f.rel for f in plan.shares[t]["train"]] for t in takers}
    assert sorted(sum(got.values(), [])) == [f"part-{i}" for i in range(6)]  # disjoint, complete
    assert sorted(sum(f.size for f in plan.shares[t]["train"]) for t in takers) == [70, 70, 70]
    assert "train" not in plan.shares["evaluator-0"]  # staged: the whole set is not copied to it
    assert "TFDIST_DATA_TRAIN" not in plan.task_env("evaluator-0")
    assert all(len(plan.shares[t]["vocab"]) == 1 for t in [*takers, "evaluator-0"])


def test_parameter_servers_get_nothing_and_the_coordinator_everything(tmp_path: Path) -> None:
    d = make_files(tmp_path, [1, 2, 3, 4])
    j = job(tmp_path, {"chief": 1, "worker": 2, "ps": 1}, strategy="parameter_server",
            data={"train": {"uris": [str(d)]}}, outputs={"model_dir": str(tmp_path / "out")})
    plan = data_plan.make(j)
    assert plan is not None
    assert "ps-0" not in plan.shares and plan.task_env("ps-0") == {}
    assert "train" not in plan.shares["chief-0"]  # staged: the coordinator copies nothing
    streamed = data_plan.make(job(tmp_path, {"chief": 1, "worker": 2, "ps": 1}, strategy="parameter_server",
                                  data={"train": {"uris": [str(d)], "mode": "stream"}}))
    assert streamed is not None
    assert len(json.loads(streamed.task_env("chief-0")["TFDIST_DATA_TRAIN"])) == 4  # every URI
    assert len(plan.shares["worker-0"]["train"]) + len(plan.shares["worker-1"]["train"]) == 4
    assert plan.writer == "chief-0"


def test_the_plan_is_the_same_every_time(tmp_path: Path) -> None:
    d = make_files(tmp_path, [5, 1, 9, 3, 7])
    j = job(tmp_path, {"worker": 2}, data={"train": {"uris": [f"{d}/*"]}})
    first, again = data_plan.make(j), data_plan.make(j)
    assert first is not None and again is not None
    assert first.task_env("worker-1") == again.task_env("worker-1")


def test_task_env_stream_has_uris_stage_has_a_plan(tmp_path: Path) -> None:
    d = make_files(tmp_path, [1, 2])
    j = job(tmp_path, {"worker": 2}, data={"raw": {"uris": [str(d)], "mode": "stream", "shard": "none"},
                                          "train": {"uris": [str(d)]}},
            outputs={"model_dir": str(tmp_path / "out")})
    plan = data_plan.make(j)
    assert plan is not None
    env = plan.task_env("worker-1")
    assert json.loads(env["TFDIST_DATA_RAW"]) == [str(d / "part-0"), str(d / "part-1")]
    assert "TFDIST_DATA_TRAIN" not in env  # set on the node once staged
    staged = json.loads(env[contract.DATA_PLAN])
    assert staged["task"] == "worker-1"
    assert [i["name"] for i in staged["inputs"]] == ["train"]
    assert len(staged["inputs"][0]["files"]) == 1
    assert staged["outputs"] == [{"name": "model_dir", "uri": str(tmp_path / "out"), "writer": False,
                                  "follow": False}]
    assert json.loads(plan.task_env("worker-0")[contract.DATA_PLAN])["outputs"][0]["writer"] is True


def test_relative_paths_are_under_the_workdir_and_keep_their_tree(tmp_path: Path) -> None:
    make_files(tmp_path, [1], "a")
    make_files(tmp_path, [2], "b")
    j = job(tmp_path, {"worker": 1}, data={"train": {"uris": ["*/part-0"]}})
    files, _, _ = resolve(j)
    assert [f.uri for f in files["train"]] == [str(tmp_path / "a/part-0"), str(tmp_path / "b/part-0")]
    assert [f.rel for f in files["train"]] == ["a/part-0", "b/part-0"]  # two part-0 kept apart


@pytest.mark.parametrize(("data", "outputs", "message"), [
    ({"train": {"uris": ["nothing-*"]}}, {}, "data.train.uris.0: 'nothing-*' matches no file"),
    ({"train": {"uris": ["missing"]}}, {}, "data.train.uris.0: 'missing' does not exist"),
    ({"train": {"uris": ["clicks/part-0"]}}, {}, "data.train: 1 file for 2 workers"),
    ({}, {"model_dir": "clicks/part-0"}, "outputs.model_dir: "),
])
def test_refused_before_anything_starts(tmp_path: Path, data: dict, outputs: dict, message: str) -> None:
    make_files(tmp_path, [1, 2])
    with pytest.raises(SpecError) as err:
        data_plan.make(job(tmp_path, {"worker": 2}, data=data, outputs=outputs))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_unreadable_directory_is_an_unreachable_store(tmp_path: Path) -> None:
    """Planned in a child where file modes bind (as root: without the capabilities that
    override them), so it runs in CI, as root, instead of skipping."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, where_modes_bind

    d = make_files(tmp_path, [1, 2])
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from pathlib import Path\n"
            "from tests.data.test_plan import job\n"
            "from tfdist.data import plan\n"
            "from tfdist.errors import SpecError\n"
            "try:\n"
            f"    plan.make(job(Path({str(tmp_path)!r}), {{'worker': 1}}, data={{'train': {{'uris': [{f'{d}/*'!r}]}}}}))\n"
            "    print('PLANNED')\n"
            "except SpecError as err:\n"
            "    print('REFUSED', err)\n")
    readable = subprocess.run(where_modes_bind([sys.executable, "-c", code]), capture_output=True, text=True, timeout=120)
    assert readable.stdout.startswith("PLANNED"), readable  # the same child plans it when it may read
    os.chmod(d, 0)
    try:
        proc = subprocess.run(where_modes_bind([sys.executable, "-c", code]), capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(d, 0o755)
    assert proc.stdout.startswith("REFUSED") and "data.train.uris.0: cannot list" in proc.stdout, proc


def test_no_data_no_plan(tmp_path: Path) -> None:
    assert data_plan.make(job(tmp_path, {"worker": 1})) is None


def test_status_lines_name_each_task_s_files_and_staging() -> None:
    from tfdist.cli.format import data_lines, staging_of

    plan = data_plan.summary({
        "inputs": {"train": {"mode": "stage", "files": 5, "bytes": 15000}},
        "outputs": {"model_dir": "hdfs://nn/m"}, "writer": "chief-0",
        "tasks": {"chief-0": {"train": ["/d/part-4"]},
                  "worker-0": {"train": [f"/d/part-{i}" for i in range(4)]}},
        "bytes": {"chief-0": {"train": 3000}, "worker-0": {"train": 12000}}})
    staging = staging_of([{"task": "chief-0", "mark": "stage", "seconds": 1.25, "files": 2, "copied": 1},
                          {"task": "chief-0", "step": 3},
                          {"task": "worker-0", "mark": "checkpoint", "seconds": 9}])
    lines = data_lines(plan, staging)
    assert lines[0] == "input train: 5 files, 15.0 KB, stage"
    assert lines[1] == "output model_dir: hdfs://nn/m (kept from chief-0)"
    assert lines[2] == ("  chief-0: train 1 file, 3.0 KB: part-4; staged in 1.25 s (copied 1 of 2 files, "
                        "the rest from the cache)")
    assert lines[3] == "  worker-0: train 4 files, 12.0 KB: part-0, part-1, part-2 and 1 more"
    assert data_lines(plan, staging, limit=1)[-1].startswith("  ... 1 more tasks")
    assert data_lines(None, {}) == []
    # goodput counts staging as its own cause: what it cost the job is said with the inputs
    good = {"wall_seconds": 20.0, "seconds": {"staging": 1.5, "productive": 10.0}}
    assert data_lines(plan, staging, goodput=good)[2] == ("staging took 1.50 s of the job's 20.0 s "
                                                          "(goodput's staging cause, 8%)")
    assert len(data_lines(plan, staging, goodput={"seconds": {"staging": 0}})) == len(lines)


def test_many_files_are_summarised_and_hostile_names_stay_text() -> None:
    """10,000 files of a task are a count, their bytes and three names; a name with a
    newline, a terminal escape or markup is one escaped line; a staging report a task printed
    itself with odd values shows only what is a number."""
    from tfdist.cli.format import data_lines

    uris = [f"hdfs://nn/clicks/part-{i:05d}" for i in range(10_000)]
    uris[0] = "/d/evil\n[red]\x1b[2J<img src=x onerror=alert(1)>\u2028" + "y" * 500
    plan = data_plan.summary({"inputs": {"train": {"mode": "stream", "files": 10_000, "bytes": 2 * 10**9}},
                              "tasks": {"worker-0": {"train": uris}},
                              "bytes": {"worker-0": {"train": 2 * 10**9}}})
    got = plan["tasks"]["worker-0"]["train"]
    assert got["files"] == 10_000 and len(got["first"]) == data_plan.FIRST_FILES
    assert all(len(u) <= data_plan.MAX_URI for u in got["first"])
    staging = {"worker-0": {"seconds": 0.5, "files": "\x1b[31m9", "copied": 1}}
    lines = data_lines(plan, staging)
    assert len(lines) == 2 and all("\n" not in line and "\x1b" not in line and "\u2028" not in line
                                   for line in lines)
    assert lines[1].startswith("  worker-0: train 10,000 files, 2.0 GB: evil\\n[red]\\x1b[2J<img src=x onerror=alert(1)>\\u2028y")
    assert lines[1].endswith("…, part-00001, part-00002 and 9,997 more; staged in 0.50 s")


def test_an_input_named_plan_is_not_the_node_plan(tmp_path: Path) -> None:
    d = make_files(tmp_path, [1, 2])
    plan = data_plan.make(job(tmp_path, {"worker": 1}, data={"plan": {"uris": [str(d)], "mode": "stream"},
                                                            "train": {"uris": [str(d)]}}))
    assert plan is not None
    env = plan.task_env("worker-0")
    assert len(json.loads(env["TFDIST_DATA_PLAN"])) == 2 and contract.DATA_PLAN in env
    assert not contract.DATA_PLAN.startswith((contract.DATA_PREFIX, contract.OUTPUT_PREFIX))

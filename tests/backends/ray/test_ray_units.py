"""The Ray backend's pure parts: gang feasibility, bundles, runtime_env; and import hygiene."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed")

from tfdist.backends.ray.plan import bundles_for, gang_problem, parse_address, runtime_env_for  # noqa: E402
from tfdist.cluster import task_ids  # noqa: E402
from tfdist.jobspec import load  # noqa: E402

pytestmark = pytest.mark.ray

TWO_NODES = [{"CPU": 2.0}, {"CPU": 2.0}]


def test_import_tfdist_never_imports_ray() -> None:
    code = "import sys, tfdist, tfdist.api, tfdist.cli, tfdist.backends; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bundles_follow_role_resources() -> None:
    worker = {"replicas": 2, "resources": {"cpus": 2, "gpus": 1}}
    ps = {"replicas": 1, "resources": {"cpus": 0.5}}
    job = load.from_dict({"name": "j", "command": ["x"], "strategy": "parameter_server",
                          "roles": {"chief": 1, "worker": worker, "ps": ps}})
    assert bundles_for(job, task_ids(job)) == [
        {"CPU": 1.0}, {"CPU": 2.0, "GPU": 1.0}, {"CPU": 2.0, "GPU": 1.0}, {"CPU": 0.5}]


@pytest.mark.parametrize(
    ("bundles", "strategy", "nodes", "problem"),
    [
        ([{"CPU": 1.0}] * 4, "SPREAD", TWO_NODES, None),
        ([{"CPU": 1.0}] * 4, "PACK", TWO_NODES, None),
        ([{"CPU": 1.0}] * 2, "STRICT_SPREAD", TWO_NODES, None),
        ([{"CPU": 1.0}] * 5, "SPREAD", TWO_NODES, "needs 5 CPU in all but the cluster has only 4 CPU"),
        ([{"CPU": 3.0}], "PACK", TWO_NODES, "needs 3 CPU and no node has that much"),
        ([{"CPU": 1.0}] * 3, "STRICT_SPREAD", TWO_NODES, "only 2 nodes can hold one"),
        ([{"CPU": 1.0, "GPU": 1.0}], "SPREAD", TWO_NODES, "0 GPU"),
        ([{"CPU": 1.0, "GPU": 1.0}] * 2, "STRICT_SPREAD", [{"CPU": 2.0, "GPU": 2.0}, {"CPU": 2.0}],
         "only 1 nodes can hold one"),
    ],
)
def test_gang_problem(bundles, strategy, nodes, problem) -> None:
    got = gang_problem(bundles, strategy, nodes)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got, got


def test_runtime_env_ships_workdir_without_runs_and_names_pip(tmp_path: Path) -> None:
    job = load.from_dict({"name": "j", "command": ["x"], "roles": {"worker": 1}, "workdir": str(tmp_path),
                          "ray": {"pip": ["requests==2.32.3"]}})
    env = runtime_env_for(job, tmp_path / "tfdist-runs")
    assert env["working_dir"] == str(tmp_path.resolve())
    assert {".git", ".venv", "__pycache__", "/tfdist-runs"} <= set(env["excludes"])
    assert env["pip"] == ["requests==2.32.3"]
    inside = runtime_env_for(job, tmp_path)  # runs straight in the workdir
    assert not any(e in ("/", "/.") for e in inside["excludes"])
    bare = load.from_dict({"name": "j", "command": ["x"], "roles": {"worker": 1},
                           "ray": {"working_dir": False}})
    assert runtime_env_for(bare) == {}


@pytest.mark.parametrize(
    ("address", "parsed"),
    [("127.0.0.1:6379", ("127.0.0.1", 6379)), (":6379", ("127.0.0.1", 6379)),
     ("head-node.example:10001", ("head-node.example", 10001)), ("[::1]:6379", ("::1", 6379))],
)
def test_parse_address_accepts_host_port(address, parsed) -> None:
    assert parse_address(address) == parsed


@pytest.mark.parametrize(
    ("address", "says"),
    [("head", "no port in 'head'"), ("head:", "the port '' is not a number"),
     ("head:port", "the port 'port' is not a number"), ("head:0", "not between 1 and 65535"),
     ("head:99999", "not between 1 and 65535"), ("head:６３７９", "is not a number"),
     ("a b:1", "'a b' is not a host name"), ("[::1:6379", "unbalanced brackets"),
     ("::1:6379", "an IPv6 host goes in brackets"), ("[zz]:1", "'zz' is not an IPv6 address")],
)
def test_parse_address_says_what_is_wrong(address, says) -> None:
    """In the user's terms, and with the forms that work; never int()'s own text."""
    with pytest.raises(ValueError, match="give HOST:PORT") as err:
        parse_address(address)
    assert says in str(err.value) and "invalid literal" not in str(err.value)


def test_actor_fences_its_attempt_when_the_driver_falls_silent(tmp_path: Path) -> None:
    """The task actor as a plain object (no Ray): an attempt whose driver stops polling (its
    host cut off) is killed, group and all, once the silence passes the actor's bound, and the
    next poll says so. Before the fence the task ran on until the node itself went, so a host
    healed before that brought the old attempt back among the new one's peers."""
    import psutil

    from tfdist.backends.ray.actor import TaskRunner

    runner = TaskRunner("worker-0", "fence-test", silence=1.0)
    try:
        reply = runner.start(0, [sys.executable, str(Path(__file__).parents[2] / "bin" / "hang.py")], {}, str(tmp_path))
        pid = reply["pid"]
        got = runner.poll(0, 10)  # the task's first line; then the driver says nothing more
        assert any("pid" in line for _, line in got["lines"]), got
        deadline = time.monotonic() + 15
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the silent attempt was not fenced"
            time.sleep(0.2)
        got = runner.poll(0, 10)
        lines = [line for _, line in got["lines"]]
        assert any("no word from the driver for 1s" in line for line in lines), lines
        if got["exit"] is None:
            got = runner.poll(0, 10)
        assert got["exit"] is not None and got["exit"][0] == -9, got
    finally:
        runner.shutdown()

"""The yarn backend's pure parts: what each role asks for, whether it can ever fit, the REST
submission (nothing but plain words on the command lines the NodeManager writes), and the
agent's reading of its task and of the job's secret from the container's credentials."""

from __future__ import annotations

import base64
import json
import os

import pytest

from tfdist.backends.yarn import plan
from tfdist.errors import SpecError
from tfdist.node import yarn_container as agent

MB = 1024 * 1024


@pytest.mark.parametrize(("quantity", "mb"), [
    (None, plan.DEFAULT_MEMORY_MB), ("512Mi", 512), ("4Gi", 4096), ("1G", 954), ("1.5Gi", 1536),
    (str(300 * MB), 300), ("1", 1), ("100k", 1), ("1e9", 954), ("4 Gi", 4096),
])
def test_memory_quantities(quantity: str | None, mb: int) -> None:
    assert plan.memory_mb(quantity, "x") == mb


@pytest.mark.parametrize("bad", ["lots", "-1Gi", "4 GB", "NaN", "-1", "0", "500m", "99999999Ti", "4Gi\x00"])
def test_bad_memory_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(SpecError, match="roles.worker.resources.memory"):
        plan.role_asks([("worker", 1, None, 0, bad)])


def test_role_asks_round_cpus_up_and_skip_empty_roles() -> None:
    asks = plan.role_asks([("ps", 1, None, 0, "512Mi"), ("worker", 2, 1.5, 1, None), ("evaluator", 0, 1, 0, None)])
    assert asks == [plan.RoleAsk("ps", 1, 512, 1, 0), plan.RoleAsk("worker", 2, 1024, 2, 1)]


SCHEDULER = {"scheduler": {"schedulerInfo": {"type": "capacityScheduler", "queues": {"queue": [
    {"queueName": "default", "queuePath": "root.default",
     "maximumAllocation": {"memory": 4096, "vCores": 4}, "maxEffectiveCapacity": {"memory": 12288, "vCores": 8}},
    {"queueName": "team", "queuePath": "root.team", "queues": {"queue": [
        {"queueName": "small", "queuePath": "root.team.small",
         "maximumAllocation": {"memory": 2048, "vCores": 2}, "maxEffectiveCapacity": {"memory": 4096, "vCores": 6}},
    ]}},
]}}}}


def test_queue_limits_find_leaves_by_name_or_path_only() -> None:
    small = plan.queue_limits(SCHEDULER, "small", {})
    assert small == plan.QueueLimits("root.team.small", 2048, 2, 4096, 6)
    assert plan.queue_limits(SCHEDULER, "root.team.small", {}) == small
    assert plan.queue_limits(SCHEDULER, "team", {}) is None  # a parent queue takes no applications
    assert plan.queue_limits(SCHEDULER, "nosuch", {}) is None
    assert plan.queue_limits({}, "default", {}) is None
    assert plan.knows_limits(SCHEDULER)
    one_user = {"scheduler": {"schedulerInfo": {"type": "capacityScheduler", "queues": {"queue": [
        {"queueName": "q", "userLimitFactor": 1.0, "minEffectiveCapacity": {"memory": 6144, "vCores": 4},
         "maxEffectiveCapacity": {"memory": 12288, "vCores": 8}}]}}}}
    limited = plan.queue_limits(one_user, "q", {})
    assert limited is not None and (limited.capacity_memory_mb, limited.capacity_vcores) == (6144, 4)
    assert not plan.knows_limits({"scheduler": {"schedulerInfo": {"type": "fairScheduler"}}})


def test_fit_counts_every_task_and_one_am_per_role() -> None:
    limits = plan.queue_limits(SCHEDULER, "small", {})
    assert limits is not None
    fits = plan.role_asks([("ps", 1, None, 0, "512Mi"), ("worker", 2, None, 0, "1Gi")])
    assert plan.fit_problem(fits, limits) is None  # 512 + 2048 + 2 x 256 <= 4096
    too_many = plan.role_asks([("worker", 4, None, 0, "1Gi")])
    assert "holds at most 4096 MB" in (plan.fit_problem(too_many, limits) or "")
    too_big = plan.role_asks([("worker", 1, None, 0, "3Gi")])
    assert "at most 2048 MB" in (plan.fit_problem(too_big, limits) or "")
    too_wide = plan.role_asks([("worker", 1, 3, 0, None)])
    assert "roles.worker.resources.cpus" in (plan.fit_problem(too_wide, limits) or "")
    vcores = plan.role_asks([("ps", 1, None, 0, "128Mi"), ("worker", 2, 2, 0, "128Mi")])
    assert "vcores at once" in (plan.fit_problem(vcores, limits) or "")  # 1 + 2 x 2 + 2 AMs > 6


def test_the_submission_keeps_the_secret_out_of_commands_and_environment() -> None:
    ask = plan.RoleAsk("worker", 2, 768, 2, 1)
    env = plan.container_env(("127.0.0.1", 5000), "tok", "worker", [{"name": "worker-0"}], "/usr/bin/python3",
                             b"zip")
    body = plan.submission("application_1_0001", "tfdist-j-worker", "tfdist", ["tfdist"], ask, env,
                           "{{PWD}}<CPS>/conf", "s3cret", 3)
    spec = body["am-container-spec"]
    command = spec["commands"]["command"]
    assert "s3cret" not in json.dumps(spec["environment"]) and "s3cret" not in command
    assert base64.b64decode(spec["credentials"]["secrets"]["entry"][0]["value"]) == b"s3cret"
    assert '"' not in command and "'" not in command and "`" not in command
    for want in ("--container_memory 768", "--container_vcores 2", "--num_containers 2",
                 "--container_resources yarn.io/gpu=1", "--container_max_retries 3"):
        assert want in command
    assert (body["queue"], body["application-tags"], body["resource"]) == \
        ("tfdist", {"tag": ["tfdist"]}, {"memory": plan.AM_MEMORY_MB, "vCores": 1})
    cmd = dict((e["key"], e["value"]) for e in spec["environment"]["entry"])["TFDIST_CMD"]
    raw = base64.b64decode(cmd)
    assert int.from_bytes(raw[:2], "big") == len(raw) - 2 and raw[2:].decode() == plan.CONTAINER_COMMAND
    job = json.loads(base64.b64decode(env["TFDIST_YARN_JOB"]))
    assert job == {"driver": ["127.0.0.1", 5000], "token": "tok", "role": "worker", "tasks": [{"name": "worker-0"}]}


def test_anything_but_plain_words_is_refused_on_the_am_command_line() -> None:
    ask = plan.RoleAsk("worker", 1, 512, 1, 0)
    for python in ['/usr/bin/py"; rm -rf ~', "/opt/my python/bin/python", "/x/$(id)"]:
        with pytest.raises(SpecError, match="plain words"):
            plan.am_command(ask, {"TFDIST_PYTHON": python}, 1)


TASKS = [{"name": "chief-0", "role": "chief"}, {"name": "worker-0", "role": "worker"},
         {"name": "worker-1", "role": "worker"}, {"name": "ps-0", "role": "ps"}]


def test_a_container_finds_its_task_from_its_shell_id() -> None:
    assert [agent.candidates(TASKS, "worker", s) for s in ("1", "2")] == [[1], [2]]
    assert agent.candidates(TASKS, "ps", "1") == [3]
    # a replacement for a container lost with its node: past the count, any of the role's
    assert agent.candidates(TASKS, "worker", "3") == [1, 2]
    assert agent.candidates(TASKS, "chief", "2") == [0]
    for bad in ("0", "-1"):
        with pytest.raises(ValueError, match="has no task"):
            agent.candidates(TASKS, "worker", bad)


def _vint(n: int) -> bytes:  # Hadoop's WritableUtils.writeVInt, for the lengths used here
    assert 0 <= n <= 127
    return bytes([n])


def _text(data: bytes) -> bytes:
    return _vint(len(data)) + data


def test_secrets_are_read_from_both_credentials_formats(tmp_path) -> None:
    # writable (what Hadoop 3.4's NodeManager wrote here): one token, then the secret keys
    token = _text(b"") + _text(b"id") + _text(b"pw") + _text(b"KIND") + _text(b"svc")
    writable = b"HDTS\x00" + _vint(1) + token + _vint(1) + _text(agent.SECRET_ALIAS) + _text(b"s3cret")
    assert agent.credential_secrets(writable) == {agent.SECRET_ALIAS: b"s3cret"}

    def field(number: int, data: bytes) -> bytes:
        return bytes([number << 3 | 2, len(data)]) + data

    kv = field(1, agent.SECRET_ALIAS) + field(3, b"s3cret")
    message = field(1, field(1, b"t")) + field(2, kv)
    proto = b"HDTS\x01" + bytes([len(message)]) + message
    assert agent.credential_secrets(proto) == {agent.SECRET_ALIAS: b"s3cret"}
    path = tmp_path / "container_tokens"
    path.write_bytes(writable)
    assert agent.job_secret({"HADOOP_TOKEN_FILE_LOCATION": str(path)}) == "s3cret"
    for bad in (b"", b"HDTS", b"NOPE\x00", b"HDTS\x07xx"):
        with pytest.raises(ValueError):
            agent.credential_secrets(bad)
    path.write_bytes(b"HDTS\x00" + _vint(0) + _vint(0))
    with pytest.raises(ValueError, match="no tfdist secret"):
        agent.job_secret({"HADOOP_TOKEN_FILE_LOCATION": str(path)})


def test_the_shipped_agent_imports_in_a_bare_python(tmp_path) -> None:
    """The zip the containers get holds everything the agent imports from tfdist, and the
    warm spares' program (read from the zip: tfdist is not installed there)."""
    import subprocess
    import sys

    from tfdist.backends.agent.ship import build

    (tmp_path / "agent.zip").write_bytes(build())
    code = ("import sys; sys.path.insert(0, 'agent.zip'); from tfdist.node import yarn_container as agent; "
            "from tfdist.node import spares; print(agent.__file__); print(spares.program_source())")
    got = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert got.returncode == 0 and "agent.zip" in got.stdout.splitlines()[0], got.stderr
    from tfdist.node import spares

    assert got.stdout.split("\n", 1)[1].rstrip("\n") == spares.program_source().rstrip("\n")


def _receive(tmp_path, archive, facts, messages) -> str:
    dest = str(tmp_path / "container" / agent.WORKDIR)
    (tmp_path / "container").mkdir(exist_ok=True)
    receiver = agent.WorkdirReceiver(dest, facts["sha256"], facts["size"])
    for message in messages:
        receiver.put(message)
    return dest


def test_the_working_directory_arrives_whole_or_not_at_all(tmp_path, monkeypatch) -> None:
    """Packed and sent in ``put`` messages (several chunks), it unpacks with its file modes;
    an archive that does not match the size and hash the job names leaves nothing."""
    from pathlib import Path

    from tfdist.backends.yarn import workdir

    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "data.bin").write_bytes(os.urandom(600_000))  # incompressible: > 1 chunk
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "x.pyc").write_bytes(b"x")
    monkeypatch.setattr(workdir, "CHUNK", 1 << 19)
    archive = tmp_path / "w.tar.gz"
    facts = workdir.pack(src, archive, [])
    messages = list(workdir.put_messages(archive))
    assert len(messages) >= 2 and [m["end"] for m in messages] == [False] * (len(messages) - 1) + [True]
    dest = Path(_receive(tmp_path, archive, facts, messages))
    assert (dest / "pkg" / "data.bin").read_bytes() == (src / "pkg" / "data.bin").read_bytes()
    assert (dest / "run.sh").stat().st_mode & 0o111 and not (dest / "__pycache__").exists()
    # a relaunched container unpacks afresh; a corrupt copy leaves no directory at all
    bad = [dict(m) for m in messages]
    bad[0]["data"] = base64.b64encode(b"garbage").decode()
    assert not Path(_receive(tmp_path, archive, facts, bad)).exists()
    assert not Path(_receive(tmp_path, archive, {**facts, "sha256": "0" * 64}, messages)).exists()
    assert list((tmp_path / "container").iterdir()) == []  # no partial file left either
    empty = tmp_path / "empty"
    empty.mkdir()
    facts = workdir.pack(empty, archive, [])  # no file at all: the task still has its directory
    assert Path(_receive(tmp_path, archive, facts, list(workdir.put_messages(archive)))).is_dir()


def test_an_archive_escaping_its_directory_is_refused(tmp_path) -> None:
    import hashlib
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    data = buf.getvalue()
    facts = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    dest = _receive(tmp_path, None, facts, [{"op": "put", "data": base64.b64encode(data).decode(), "end": True}])
    assert not (tmp_path / "container" / "escaped").exists() and not (tmp_path / "escaped").exists()
    assert not os.path.exists(dest)


def test_tasks_on_a_node_the_rm_gave_up_on_are_named() -> None:
    nodes = [{"id": "a:8042", "state": "RUNNING"}, {"id": "b:8042", "state": "LOST", "nodeHTTPAddress": ""},
             {"id": "c:8042", "state": "LOST"}, {"id": "c:8042", "state": "RUNNING"},
             {"id": "d:8042", "state": "UNHEALTHY"}]
    placed = {"worker-0": "a:8042", "worker-1": "b:8042", "ps-0": "c:8042", "chief-0": "d:8042", "x-0": "z:1"}
    assert plan.lost_nodes(placed, nodes) == {"worker-1": "its node b:8042 is LOST at the ResourceManager"}


def test_a_dropped_container_is_named_with_its_node_host_and_neighbours() -> None:
    agents = {"chief-0": {"node": "h2:8041"}, "worker-0": {"node": "h1:8041"}, "worker-1": {"node": "h2:8041"}}
    info = {"node": "h2:8041", "hostname": "h2", "host": "198.18.0.12", "container": "container_1_0001_01_000002"}
    line = plan.lost_container(info, "closed", agents)
    assert line == ("its YARN container ended (container container_1_0001_01_000002 on node h2:8041 on host h2 "
                    "(198.18.0.12) lost, or killed; this job's tasks on that node: chief-0, worker-1)")
    assert plan.lost_container(info, "silent for 30s", agents).startswith("its YARN container went silent")


def _node(name: str, state: str, vcores: int, memory: int = 6144) -> dict:
    return {"id": f"{name}:8041", "nodeHostName": name, "state": state,
            "totalResource": {"memory": memory, "vCores": vcores}}


def test_the_gang_no_longer_fits_the_nodes_left() -> None:
    asks = plan.role_asks([("worker", 4, 2, 0, None)])  # 4 x 2 vcores + 1 for the AM: 9
    both = [_node("h1", "RUNNING", 6), _node("h2", "RUNNING", 6)]
    assert plan.no_longer_fits(asks, both) is None
    one = [_node("h1", "RUNNING", 6), _node("h2", "LOST", 6)]
    assert plan.no_longer_fits(asks, one) == (
        "the job no longer fits the YARN cluster: its 4 tasks need 9 vcores and 4352 MB at once "
        "(4 x (1024 MB, 2 vcores) for worker, and an ApplicationMaster per role); the NodeManagers "
        "left (h1) have 6 vcores and 6144 MB")
    big = plan.role_asks([("worker", 1, 4, 0, None)])
    assert "fit none of the NodeManagers left (h1, h2)" in str(plan.no_longer_fits(big, [_node("h1", "RUNNING", 3),
                                                                                       _node("h2", "RUNNING", 3)]))
    # an RM without totalResource: available + used
    old = [{"id": "h1:8041", "state": "RUNNING", "availableVirtualCores": 4, "usedVirtualCores": 6,
            "availMemoryMB": 8000, "usedMemoryMB": 2000}]
    assert plan.no_longer_fits(asks, old) is None

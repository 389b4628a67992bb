"""The job spec: valid files load, every kind of bad input is one clear SpecError."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tfdist.errors import SpecError
from tfdist.jobspec import load, model

GOOD = """
name: digits-mwms
strategy: multi_worker_mirrored
command: python train.py --epochs 3
workdir: .
env: {SOME_VAR: value, N: 3}
roles:
  chief: 1
  worker: {replicas: 2, resources: {cpus: 1, gpus: 0}}
  evaluator: {replicas: 1, command: [python, evaluate.py]}
restart: {policy: on-failure, max_restarts: 3}
success: chief
deadline_seconds: 1800
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_good_file_loads_with_shorthand_and_split_command(tmp_path: Path) -> None:
    job = load.from_file(write(tmp_path, GOOD))
    assert job.replicas("chief") == 1 and job.replicas("worker") == 2
    assert job.command_for("worker") == ["python", "train.py", "--epochs", "3"]
    assert job.command_for("evaluator") == ["python", "evaluate.py"]
    assert job.env == {"SOME_VAR": "value", "N": "3"}
    assert job.restart_policy_for("worker") == "on-failure"
    assert Path(job.workdir) == tmp_path.resolve()


def test_round_trip_through_dict(tmp_path: Path) -> None:
    job = load.from_file(write(tmp_path, GOOD))
    assert load.from_dict(job.to_dict()) == job


def test_overrides_apply_before_validation(tmp_path: Path) -> None:
    job = load.from_file(write(tmp_path, GOOD), ["roles.worker.replicas=3", "restart.policy=never"])
    assert job.replicas("worker") == 3
    assert job.restart.policy == "never"
    job = load.from_file(write(tmp_path, GOOD), ["roles.chief.replicas=0"])
    assert not job.has_chief


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: a\nroles: {worker: 1}\ncommand: x\nroels: {}\n", "unknown key 'roels' in top level; did you mean 'roles'?"),
        ("name: a\nroles: {worker: {replicas: 1, comand: x}}\ncommand: x\n", "did you mean 'command'?"),
        ("name: a\nroles: {wroker: 1}\ncommand: x\n", "unknown role 'wroker'"),
        ("name: a\nroles: {worker: -1}\ncommand: x\n", "roles.worker.replicas: Input should be greater than or equal to 0 (got -1)"),
        ("name: a\nroles: {worker: true}\ncommand: x\n", "roles.worker.replicas: Input should be a valid integer (got True)"),
        ("name: a\nroles: {worker: {replicas: 1, resources: {gpus: 0.5}}}\ncommand: x\n", "roles.worker.resources.gpus: Input should be a valid integer"),
        ("name: a\nroles: {worker: {replicas: two}}\ncommand: x\n", "roles.worker.replicas"),
        ("name: a\nroles: {chief: 2, worker: 1}\ncommand: x\n", "at most one chief"),
        ("name: a\nstrategy: parameter_server\nroles: {chief: 1, worker: 2}\ncommand: x\n", "needs at least one ps"),
        ("name: a\nstrategy: parameter_server\nroles: {chief: 1, ps: 1}\ncommand: x\n", "needs at least one worker"),
        ("name: a\nroles: {worker: 2, ps: 1}\ncommand: x\n", "has no parameter servers"),
        ("name: a\nstrategy: parameter_server\nroles: {worker: 2, ps: 1}\ncommand: x\n", "needs a chief"),
        ("name: a\nroles: {worker: 2}\n", "roles.worker.command"),
        ("name: Bad_Name\nroles: {worker: 1}\ncommand: x\n", "name: use lower-case"),
        ("name: a\nstrategy: magic\nroles: {worker: 1}\ncommand: x\n", "strategy: Input should be"),
        ("name: a\nroles: {worker: 1}\ncommand: x\nrestart: {policy: sometimes}\n", "restart.policy"),
        ("name: a\nroles: {}\ncommand: x\n", "at least one chief or worker"),
        ("name: a\nroles: {worker: 2}\ncommand: x\noptions: {update: {mode: backup}}\n", "needs strategy: parameter_server"),
        ("name: a\nstrategy: parameter_server\nroles: {chief: 1, worker: 3, ps: 1}\ncommand: x\n"
         "options: {update: {mode: sync, replicas_to_aggregate: 2}}\n", "use mode: backup"),
        ("name: a\nstrategy: parameter_server\nroles: {chief: 1, worker: 3, ps: 1}\ncommand: x\n"
         "options: {update: {mode: timeout}}\n", "options.update.timeout_seconds"),
        ("- just\n- a list\n", "must be a mapping"),
        ("name: a\nroles: {worker: 1\ncommand: x\n", "line 3"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        load.from_file(write(tmp_path, text))
    message = str(err.value)
    assert expected in message
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "job.yaml"))


def test_missing_file_is_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read the job file"):
        load.from_file(tmp_path / "nope.yaml")


def test_quick_form_defaults() -> None:
    job = load.quick(["python", "t.py"], workers=2, ps=1, chief=True)
    assert job.strategy == "parameter_server"
    assert (job.replicas("chief"), job.replicas("worker"), job.replicas("ps")) == (1, 2, 1)
    assert load.quick(["python", "t.py"]).replicas("worker") == 1
    with pytest.raises(SpecError, match="--env"):
        load.quick(["x"], env=["NOEQUALS"])
    with pytest.raises(SpecError, match="after '--'"):
        load.quick([])


def test_bad_override_is_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="KEY=VALUE"):
        load.from_file(write(tmp_path, GOOD), ["roles.worker.replicas"])


def test_restart_budget_is_zero_when_nothing_restarts() -> None:
    never = load.quick(["x"], workers=2)
    assert never.restart.policy == "never" and never.restart_budget == 0
    evaluator_only = load.from_dict({"name": "a", "command": ["x"], "roles": {
        "worker": 1, "evaluator": {"replicas": 1, "restart": "on-failure"}}})
    # the evaluator's restarts are its own: training still has none
    assert evaluator_only.restart_budget == 0
    worker_too = dataclasses.replace(evaluator_only, restart=model.RestartSpec(policy="on-failure"))
    assert worker_too.restart_budget == 3


def test_quick_form_names_the_job_after_its_command() -> None:
    """Not "job" (the summary read "job job"): the script's stem and a short random suffix."""
    import re

    names = {load.quick(["python", "train.py", "--epochs", "3"]).name for _ in range(5)}
    assert all(re.fullmatch(r"train-[0-9a-f]{4}", n) for n in names) and len(names) > 1
    assert re.fullmatch(r"my-script-[0-9a-f]{4}", load.quick(["/usr/bin/python3", "-u", "My_Script.py"]).name)
    assert re.fullmatch(r"sleep-[0-9a-f]{4}", load.quick(["sleep", "3"]).name)
    assert re.fullmatch(r"job-9lives-[0-9a-f]{4}", load.quick(["9lives"]).name)  # must start with a letter
    assert load.quick(["python", "t.py"], name="given").name == "given"


# -- resources.memory: one rule for every backend ------------------------------------------------


@pytest.mark.parametrize(("text", "size"), [
    ("512Mi", 512 << 20), ("4Gi", 4 << 30), ("1G", 10**9), ("1e9", 10**9), ("300", 300), ("1", 1),
    ("100k", 100_000), ("100K", 100_000), ("1.5Gi", 3 << 29), (".5Gi", 1 << 29), ("4 Gi", 4 << 30),
    ("0.1", 1), ("1Pi", 1 << 50),
])
def test_memory_sizes_every_backend_reads(text: str, size: int) -> None:
    assert model.memory_bytes(text) == size


@pytest.mark.parametrize(("text", "words"), [
    ("NaN", "not a memory size"), ("nan", "not a memory size"), ("inf", "not a memory size"),
    ("-1", "no sign"), ("-1Gi", "no sign"), ("+1Gi", "no sign"), ("0", "more than 0 bytes"),
    ("0.0Mi", "more than 0 bytes"), ("500m", "milli"), ("99999999Ti", "at most 1Pi"), ("1Ei", "at most 1Pi"),
    ("1e400", "at most 1Pi"), ("2GB", "not a memory size"), ("4 GB", "not a memory size"),
    ("4Gi\x00", "not a memory size"), ("", "not a memory size"), ("9" * 100, "not a memory size"),
])
def test_bad_memory_sizes_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        model.memory_bytes(text)


def test_the_spec_refuses_bad_memory_and_cpus_naming_the_field(tmp_path: Path) -> None:
    for resources, field in (("{memory: NaN}", "memory"), ("{memory: '-1'}", "memory"), ("{memory: '0'}", "memory"),
                             ("{memory: -1}", "memory"), ("{cpus: 1e9}", "cpus"), ("{cpus: .nan}", "cpus")):
        with pytest.raises(SpecError, match=rf"roles\.worker\.resources\.{field}"):
            load.from_file(write(tmp_path, f"name: a\ncommand: x\nroles: {{worker: {{replicas: 1, resources: {resources}}}}}\n"))


def test_memory_keeps_its_text_in_a_form_kubernetes_takes() -> None:
    job = load.from_dict({"name": "a", "command": ["x"], "roles": {"worker": {"resources": {"memory": " 4 Gi "}},
                                                                    "chief": {"resources": {"memory": "100K"}}}}, "t")
    assert (job.role("worker").resources.memory, job.role("worker").resources.memory_bytes) == ("4Gi", 4 << 30)
    assert job.role("chief").resources.memory == "100k"
    assert model.JobSpec.build(job.to_dict()) == job  # round trip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("spark: {conf: {'': x}}", "spark.conf: a setting with an empty name"),
        ("spark: {conf: {'  ': x}}", "spark.conf: a setting with an empty name"),
        ("spark: {conf: {\"spark.a\\nb\": x}}", "spark.conf: 'spark.a\\nb'"),
        ("python: {requirements_file: ''}", "python.requirements_file"),
        ("python: {requirements: ['']}", "python.requirements: an empty requirement"),
        ("python: {requirements: ['numpy', '  ']}", "python.requirements: an empty requirement"),
        ("python: {requirements: ''}", "python.requirements: an empty requirement"),
        ("python: {requirements: [numpy], index_url: ftp://mirror/simple}", "python.index_url: 'ftp://mirror/simple'"),
        ("python: {requirements: [numpy], index_url: mirror.example/simple}", "python.index_url"),
        ("python: {requirements: [numpy], index_url: \"https://a/simple\\n--trusted-host x\"}", "python.index_url"),
        ("python: {requirements: [numpy], index_url: 'https:///simple'}", "python.index_url"),
        ("python: {requirements: [numpy], index_url: ''}", "python.index_url"),
        # a port that is not one was blamed on the requirements (uv: "invalid port number")
        ("python: {requirements: [numpy], index_url: 'https://mirror:99999/simple'}", "python.index_url"),
        ("python: {requirements: [numpy], index_url: 'https://mirror:abc/simple'}", "python.index_url"),
        # empty text quietly meant the default: a job meant for a cluster ran on this machine
        ("spark: {master: ''}", "spark.master: empty; give a value, or leave it out for SPARK_MASTER"),
        ("spark: {master: '  '}", "spark.master: empty"),
        ("spark: {master_ui: ''}", "spark.master_ui: empty"),
        ("ray: {address: ''}", "ray.address: empty; give a value, or leave it out for RAY_ADDRESS"),
        ("kubernetes: {image: ''}", "kubernetes.image: empty; give the container image"),
        ("kubernetes: {image: img, service_account: ''}", "kubernetes.service_account: empty"),
        ("kubernetes: {image: img, working_dir: ' '}", "kubernetes.working_dir: empty"),
        ("kubernetes: {image: img, model_volume_claim: ''}", "kubernetes.model_volume_claim: empty"),
        ("roles: {worker: {replicas: 1, kubernetes: {image: ''}}}", "roles.worker.kubernetes.image: empty"),
    ],
)
def test_empty_and_malformed_values_are_refused(tmp_path: Path, text: str, expected: str) -> None:
    """An empty key or value is refused where it is written, not found later (an empty
    requirement blamed on pip, an index URL that is not http(s) retried for 12 s)."""
    with pytest.raises(SpecError) as err:
        roles = "" if text.startswith("roles:") else "roles: {worker: 1}\n"
        load.from_file(write(tmp_path, "name: a\n" + roles + "command: x\n" + text + "\n"))
    message = str(err.value)
    assert expected in message and "\n" not in message, message


def test_good_index_urls_and_spark_settings_still_load(tmp_path: Path) -> None:
    job = load.from_file(write(tmp_path, "name: a\nroles: {worker: 1}\ncommand: x\n"
                                         "python: {requirements: [numpy], index_url: 'HTTPS://pypi.example:8443/simple'}\n"
                                         "spark: {conf: {spark.yarn.queue: research}}\n"))
    assert job.python.index_url == "HTTPS://pypi.example:8443/simple"
    assert job.spark.conf == {"spark.yarn.queue": "research"}

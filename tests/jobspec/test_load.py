"""Hostile and surprising job files: exact text, one-line refusals, nothing blocks or explodes.

Each case here failed on the YAML 1.1 loader (a rewritten value, a traceback, a hang or
gigabytes of memory) and is one clear SpecError or the value as typed now.
"""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from tfdist.errors import SpecError
from tfdist.jobspec import load
from tfdist.jobspec.yaml import MAX_BYTES

BASE = "name: a\nroles: {worker: 1}\n"


def write(tmp_path: Path, text: str | bytes, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def refused(tmp_path: Path, text: str | bytes, overrides: list[str] | None = None) -> str:
    with pytest.raises(SpecError) as err:
        load.from_file(write(tmp_path, text), overrides)
    message = str(err.value)
    assert "\n" not in message, message
    return message


# -- section 6: what the user typed is what the task gets ---------------------------------------


def test_command_and_env_keep_the_text_as_written(tmp_path: Path) -> None:
    job = load.from_file(write(tmp_path, BASE + (
        "command: [python, train.py, --seed, 0123, yes, 0x1F, off, 010, 1e3, 1.50, 2024-01-01, '=', 0o17]\n"
        "env: {ID: 010, FLAG: off, ON: yes, HEX: 0x1F, N: 3, DATE: 2024-01-01}\n"
    )))
    assert job.command_for("worker")[2:] == [
        "--seed", "0123", "yes", "0x1F", "off", "010", "1e3", "1.50", "2024-01-01", "=", "0o17",
    ]
    assert job.env == {"ID": "010", "FLAG": "off", "ON": "yes", "HEX": "0x1F", "N": "3", "DATE": "2024-01-01"}


def test_numbers_stay_numbers_where_numbers_are_meant(tmp_path: Path) -> None:
    job = load.from_file(write(tmp_path, "name: a\ncommand: x\nroles: {worker: 2, chief: {replicas: 1}}\n"
                                    "deadline_seconds: 60\nrestart: {max_restarts: 0x5}\n"))
    assert job.replicas("worker") == 2 and type(job.roles["chief"].replicas) is int
    assert job.deadline_seconds == 60.0 and job.restart.max_restarts == 5
    assert "0x5" not in job.to_yaml() and "max_restarts: 5" in job.to_yaml()


def test_set_values_keep_their_text_too(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "command: [python, t.py]\n")
    job = load.from_file(path, ["env.ID=010", "env.B=off", "roles.worker.replicas=2", "command=[echo, 0123]"])
    assert job.env == {"ID": "010", "B": "off"}
    assert job.replicas("worker") == 2 and job.command == ["echo", "0123"]
    quick = load.quick(["python", "t.py"], name="q")
    again = load.from_dict(load.apply_overrides(quick.to_dict(), ["env.ID=010"], "--set"), "--set")
    assert again.env == {"ID": "010"}


def test_set_keys_inside_a_free_form_map_are_taken_whole(tmp_path: Path) -> None:
    """``spark.conf.spark.yarn.queue=x`` sets the Spark setting ``spark.yarn.queue`` (it was
    split at every dot into ``conf: {spark: {yarn: {queue: x}}}``, whose text Spark never read)."""
    path = write(tmp_path, BASE + "command: [python, t.py]\n")
    job = load.from_file(path, ["spark.conf.spark.yarn.queue=research", "spark.conf.spark.executor.cores=2",
                                "kubernetes.labels.app.kubernetes.io/name=x", "roles.worker.env.A.B=1",
                                "roles.worker.replicas=2"])
    assert job.spark.conf == {"spark.yarn.queue": "research", "spark.executor.cores": "2"}
    assert job.kubernetes.labels == {"app.kubernetes.io/name": "x"}
    assert job.roles["worker"].env == {"A.B": "1"} and job.replicas("worker") == 2
    with pytest.raises(SpecError, match="did you mean 'conf'"):
        load.from_file(path, ["spark.conff.spark.yarn.queue=x"])


def test_a_nested_mapping_in_spark_conf_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "command: [python, t.py]\nspark: {conf: {spark: {yarn: {queue: x}}}}\n")
    with pytest.raises(SpecError) as err:
        load.from_file(path)
    assert str(err.value).count("\n") == 0
    assert "spark.conf: 'spark' holds a mapping; write each setting as one dotted key" in str(err.value)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("command: [echo, true]\n", 'command.1: true is read as a boolean by YAML; quote it ("true")'),
        ("command: [echo, ~]\n", "command.1: has no value (null)"),
        ("command: [echo, [a]]\n", "command.1: is a list"),
        ("command: [echo]\nenv: {A: ~}\n", 'env.A: has no value (null); write "" for an empty string'),
        ("command: [echo]\nenv: {A: [1, 2]}\n", "env.A: is a list"),
        ("command: [echo]\nenv: {A: {b: 1}}\n", "env.A: is a mapping"),
        ("command: [echo]\nenv: {A: false}\n", "quote it"),
        ("command: [echo]\nroles: {worker: {env: {A: ~}}}\n", "roles.worker.env.A: has no value"),
    ],
)
def test_values_without_faithful_text_are_refused_with_a_hint(tmp_path: Path, line: str, expected: str) -> None:
    text = BASE + line if "roles:" not in line else "name: a\n" + line
    assert expected in refused(tmp_path, text)


# -- section 5: every bad input is one line ----------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('command: [echo, "a\\0b"]\n', "command.1: contains a NUL byte"),
        ('command: [echo]\nenv: {A: "x\\0"}\n', "env.A: contains a NUL byte"),
        ('command: "echo \\0"\n', "command: contains a NUL byte"),
        ('command: [echo]\nworkdir: "a\\0"\n', "workdir: contains a NUL byte"),
        ('command: [echo]\nenv: {"": x}\n', "is no environment variable name"),
        ('command: [echo]\nenv: {"A=B": x}\n', "'A=B' is no environment variable name"),
        ("command: [echo]\nenv: {true: x}\n", "env.True (a name)"),
    ],
)
def test_nul_bytes_and_bad_env_names(tmp_path: Path, line: str, expected: str) -> None:
    assert expected in refused(tmp_path, BASE + line)


@pytest.mark.parametrize(
    ("key", "bound"),
    [
        ("deadline_seconds", "2,592,000 seconds (30 days)"),
        ("hang_timeout_seconds", "2,592,000 seconds (30 days)"),
        ("drain_seconds", "86,400 seconds (1 day)"),
        ("stop_grace_seconds", "3,600 seconds (1 hour)"),
        ("restart.backoff_seconds", "86,400 seconds (1 day)"),
        ("restart.backoff_max_seconds", "86,400 seconds (1 day)"),
        ("options.communication.timeout_seconds", "86,400 seconds (1 day)"),
        ("options.update.timeout_seconds", "86,400 seconds (1 day)"),
        ("kubernetes.unschedulable_timeout_seconds", "86,400 seconds (1 day)"),
    ],
)
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e30"])
def test_every_duration_is_bounded_and_finite(tmp_path: Path, key: str, bound: str, value: str) -> None:
    message = refused(tmp_path, BASE + "command: x\n", [f"{key}={value}"])
    assert key in message
    if value != "-.inf":  # not finite: the schema's own "finite number" message
        assert bound in message


def test_floats_everywhere_are_finite(tmp_path: Path) -> None:
    assert "finite number" in refused(tmp_path, BASE + "command: x\n", ["roles.worker.resources.cpus=.inf"])
    assert "restart.max_restarts" in refused(tmp_path, BASE + "command: x\n", ["restart.max_restarts=1e30"])


def test_replicas_beyond_the_task_cap_are_refused_up_front(tmp_path: Path) -> None:
    message = refused(tmp_path, "name: a\ncommand: x\nroles: {worker: 100000}\n")
    assert "100,000 tasks" in message and "(2,000)" in message and "supervisor" in message
    assert "tasks" in refused(tmp_path, "name: a\ncommand: x\nroles: {worker: 1500, ps: 600}\n")
    # the 1,000-task jobs the scale work targets stay allowed
    assert load.from_file(write(tmp_path, "name: a\ncommand: x\nroles: {worker: 1000}\n")).replicas("worker") == 1000


def test_a_name_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    assert "name: use lower-case" in refused(tmp_path, 'name: "abc\\n"\ncommand: x\nroles: {worker: 1}\n')
    with pytest.raises(SpecError, match="name"):
        load.quick(["echo"], name="abc\n")


def test_duplicate_keys_are_named_with_their_lines(tmp_path: Path) -> None:
    message = refused(tmp_path, "name: a\ncommand: x\nroles: {worker: 1}\nname: b\n")
    assert "line 4" in message and "duplicate key 'name' (first on line 1)" in message
    assert "duplicate key 'A'" in refused(tmp_path, BASE + "command: x\nenv:\n  A: 1\n  A: 2\n")
    # a merge key is no duplicate: the mapping's own keys override merged ones
    job = load.from_file(write(tmp_path, "name: a\ncommand: x\nenv: &base {A: '1', B: '2'}\n"
                                    "roles: {worker: {env: {<<: *base, B: '3'}}}\n"))
    assert job.role("worker").env == {"A": "1", "B": "3"}


def test_alias_bomb_is_refused_fast_and_small(tmp_path: Path) -> None:
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    tracemalloc.start()
    try:
        message = refused(tmp_path, "\n".join(lines) + "\n")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "aliases are expanded" in message
    assert peak < 50 << 20  # the unbounded loader took 2.4 GB


def test_circular_alias_and_deep_nesting(tmp_path: Path) -> None:
    assert "circular alias" in refused(tmp_path, "name: &n [a, *n]\n")
    assert "nested more than 64 levels" in refused(tmp_path, "a: " + "[" * 100 + "]" * 100 + "\n")
    assert "nest" in refused(tmp_path, "a: " + "[" * 5000 + "\n")  # libyaml stops at 1,000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "NUL bytes: it is binary"),
        ("name: caf\u00e9\n".encode("latin-1"), "not UTF-8 text (byte 0xe9 at offset 9)"),
        (b"name: a\x01\n", "malformed YAML"),
        (b"x: " + b"a" * (MAX_BYTES + 10), "at most 1024 KiB"),
        (b"", "a job file must be a mapping"),
        (b"42\n", "a job file must be a mapping of keys, got int"),  # not the reader's YInt
        (b"4.2\n", "a job file must be a mapping of keys, got float"),
        (b"x: !!python/object/apply:os.system [echo hi]\n", "malformed YAML"),
        (b"x: " + b"9" * 5000 + b"\n", "is not a whole number"),
        (b"x:\n" + b"- a\n" * 200_000, "more than 20,000 values"),  # stops early, not at the end
    ],
)
def test_files_that_are_not_small_yaml_text(tmp_path: Path, text: bytes, expected: str) -> None:
    assert expected in refused(tmp_path, text)


def test_directories_fifos_and_devices_never_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    results: list[str] = []

    def attempt(path: str | Path) -> None:
        with pytest.raises(SpecError) as err:
            load.from_file(path)
        results.append(str(err.value))

    for target in (fifo, "/dev/zero", tmp_path):
        worker = threading.Thread(target=attempt, args=(target,), daemon=True)
        worker.start()
        worker.join(60)  # generous: a blocked open() would never return at all
        assert not worker.is_alive(), f"loading {target} blocked"
    assert "not a regular file" in results[0] and "not a regular file" in results[1]
    assert "is a directory" in results[2]


def test_a_workdir_the_system_cannot_name_is_refused_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name over NAME_MAX, a path over PATH_MAX, a loop of symbolic links: the backends'
    ``is_dir()`` (or ``resolve()``) raised, a traceback after the job was planned."""
    (tmp_path / "loop").symlink_to("loop")
    monkeypatch.chdir(tmp_path)  # the quick form's workdir is relative to where tfdist runs
    for workdir, reason in (("n" * 300, "File name too long"), ("/".join(["p" * 200] * 25), "File name too long"),
                            ("loop/x", "Too many levels of symbolic links")):
        message = refused(tmp_path, BASE + "command: x\n", [f"workdir={workdir}"])
        assert f"job.yaml: workdir: '{workdir[:20]}" in message and reason in message, message
        assert len(message) < len(str(tmp_path)) + 200
        with pytest.raises(SpecError, match=f"^command line: workdir: .*{reason}"):
            load.quick(["x"], overrides=[f"workdir={workdir}"])


def test_whole_numbers_past_pythons_digit_limit_are_refused_in_every_base(tmp_path: Path) -> None:
    """Decimals of over 4,300 digits were refused, but Python converts hex and octal ones
    without that limit, and printing one (a refusal's '(got ...)') then raised ValueError: a
    traceback. Two 4,300-digit counts convert, but their sum has one digit more: the task cap's
    message said only 'use sys.set_int_max_str_digits()'."""
    for digits in ("0x" + "f" * 5000, "0o" + "7" * 5000):
        message = refused(tmp_path, BASE + "command: x\nrestart: {max_restarts: " + digits + "}\n")
        assert "line 4" in message and "is not a whole number tfdist reads" in message, message
    big = "9" * 4300
    message = refused(tmp_path, f"name: a\ncommand: x\nroles: {{worker: {big}, ps: {big}}}\n")
    assert "job.yaml: roles: " in message and "more than one job may have (2,000)" in message, message
    assert len(message) < 400


def test_a_set_key_nested_deeper_than_a_job_file_may_be_is_refused(tmp_path: Path) -> None:
    """A --set key of 5,000 dotted parts built a mapping 5,000 deep, which normalize() met as
    a RecursionError traceback; a job file stops at 64 levels, and so does a --set key now."""
    for key in ("x." * 5000 + "y", "roles.worker." + "x." * 70 + "y", "kubernetes.tolerations." + "x." * 5000 + "y"):
        message = refused(tmp_path, BASE + "command: x\n", [f"{key}=1"])
        assert message.startswith(f"--set '{key[:20]}") and "more than 64 parts" in message, message
        assert len(message) < 300
        with pytest.raises(SpecError, match="more than 64 parts"):
            load.quick(["x"], overrides=[f"{key}=1"])
    # a free-form map's key is one key, however many dots it has
    job = load.from_file(write(tmp_path, BASE + "command: x\n"), ["env." + "x." * 100 + "y=1"])
    assert job.env == {"x." * 100 + "y": "1"}


def test_a_set_value_that_is_not_utf8_is_refused_in_one_line(tmp_path: Path) -> None:
    """A --set value with a byte that is not UTF-8 reaches Python as a lone surrogate
    (surrogateescape); libyaml's parser raised UnicodeEncodeError on it: a traceback."""
    message = refused(tmp_path, BASE + "command: x\n", ["env.A=caf\udce9"])
    assert message == "--set env.A: not UTF-8 text (byte 0xe9 at offset 3); give UTF-8 text", message
    with pytest.raises(SpecError, match="not UTF-8 text"):
        load.quick(["x"], overrides=["command=[x, \udcff]"])


def test_a_job_written_as_yaml_reads_back_the_same(tmp_path: Path) -> None:
    """job.yaml, which a submitted job's detached run reads back, was dumped by PyYAML's YAML
    1.1 rules: a string that only YAML 1.2 reads as a number (1e3, 5e12345, 0o17, +1e3) went
    out unquoted and came back a number, so the submitted job could not load ('lost')."""
    job = load.from_file(write(tmp_path, BASE + (
        "command: [x, '1e3']\nkubernetes: {image: '1e3', labels: {commit: '5e12345', v: '0o17'}}\n"
        "yarn: {queue: '+1e3'}\nspark: {conf: {a: '.5e3', b: '0x1F', c: '1_000'}}\n")))
    assert load.from_file(write(tmp_path, job.to_yaml(), "again.yaml")) == job

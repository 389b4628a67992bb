"""Bad input through the real CLI: one line on stderr, exit code 2, nothing started."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, TFDIST, tfdist


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("name: a\nroles: {worker: 1}\ncommand: [python, x.py]\nroels: 1\n", "did you mean 'roles'"),
        ("name: a\nroles: {worker: 1\n", "malformed YAML"),
        ("name: a\nroles: {worker: {replicas: -2}}\ncommand: [python]\n", "roles.worker.replicas"),
        ("name: a\nroles: {chief: 2}\ncommand: [python]\n", "at most one chief"),
        ("name: a\nstrategy: parameter_server\nroles: {worker: 2}\ncommand: [python]\n", "at least one ps"),
        ("name: a\nroles: {worker: 1}\ncommand: [no-such-program-xyz]\n", "'no-such-program-xyz' was not found"),
        ("name: a\nroles: {worker: 1}\ncommand: [./missing.sh]\n", "'./missing.sh' was not found"),
        ("name: a\nroles: {worker: 1}\ncommand: [python]\nworkdir: nowhere\n", "workdir:"),
    ],
)
def test_bad_job_file(tmp_path: Path, body: str, expected: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(body)
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), str(job))
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run"], "give a job file"),
        (["run", "--workers", "x", "--", "python"], "invalid int value"),
        (["run", "--strategy", "nope", "--", "python"], "strategy"),
        (["run", "--backend", "mars", "--workers", "1", "--", "python"], "unknown backend 'mars'"),
        (["run", "job.yaml", "--", "python"], "not both"),
        (["run", "--workers", "1", "--", "no-such-program-xyz"], "was not found"),
        (["frobnicate"], "tfdist: error: unknown command 'frobnicate'; the commands are run, submit,"),
        ([], "tfdist: error: give a command; the commands are run,"),
        (["env", "frob"], "tfdist: error: env: unknown command 'frob'; the commands are list, clean"),
        (["run", "--workers", "1", "--backend", "ray", "--ray-address", "head:port", "--", "python"],
         "--ray-address head:port: the port 'port' is not a number; give HOST:PORT"),
        (["run", "--workers", "1", "--backend", "ray", "--ray-address", "127.0.0.1:99999", "--", "python"],
         "the port 99999 is not between 1 and 65535"),
        # Spark reads local[N] as a Java int (NumberFormatException after the run directory was made,
        # exit 1); a port of 30 digits overflowed Python's socket (a traceback)
        (["run", "--workers", "1", "--backend", "spark", "--spark-master", "local[99999999999]", "--", "python"],
         "spark.master: 'local[99999999999]': 99999999999 is more than Spark reads (at most 2,147,483,647)"),
        (["run", "--workers", "1", "--backend", "spark", "--spark-master", "local-cluster[1,1," + "9" * 5000 + "]",
          "--", "python"], "is more than Spark reads"),
        (["run", "--workers", "1", "--backend", "spark", "--spark-master", "spark://127.0.0.1:" + "9" * 30, "--",
          "python"], "is not a Spark master URL"),
        (["run", "--workers", "1", "--backend", "spark", "--spark-master", "spark://127.0.0.1:99999", "--", "python"],
         "spark.master: 'spark://127.0.0.1:99999' is not a Spark master URL"),
        # a Ray client address was not checked: Ray's own retries, 30 s, gRPC's lines, exit 1
        (["run", "--workers", "1", "--backend", "ray", "--ray-address", "ray://", "--", "python"],
         "--ray-address ray://: no port in ''; give HOST:PORT"),
        (["run", "--workers", "1", "--backend", "ray", "--ray-address", "ray://127.0.0.1:0", "--", "python"],
         "--ray-address ray://127.0.0.1:0: the port 0 is not between 1 and 65535"),
        (["run", "--workers", "1", "--backend", "ray", "--ray-address", "ray://127.0.0.1:1", "--", "python"],
         "--ray-address ray://127.0.0.1:1: no Ray cluster answers there (Connection refused)"),
    ],
)
def test_bad_command_line(tmp_path: Path, args: list[str], expected: str) -> None:
    proc = tfdist(*args, "--runs-dir", str(tmp_path / "runs")) if args[:1] == ["run"] and "--" not in args else \
        tfdist(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert proc.stderr.count("tfdist: error:") == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "tfdist-runs").exists()


def test_ok_program_runs(tmp_path: Path) -> None:
    proc = tfdist("run", "-q", "--runs-dir", str(tmp_path), "--workers", "1", "--", "python", str(BIN / "ok.py"))
    assert proc.returncode == 0
    # the quick form's job is named after its command, not "job"
    (run_dir,) = tmp_path.iterdir()
    assert re.fullmatch(r"ok-[0-9a-f]{4}-.*", run_dir.name), run_dir.name


ALIAS_BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)
GOOD_HEAD = "name: a\nroles: {worker: 1}\ncommand: [python, x.py]\n"


@pytest.mark.parametrize(
    ("body", "sets", "expected"),
    [
        (ALIAS_BOMB.encode(), [], "aliases are expanded"),
        (b"a: &a [*a]\n", [], "circular alias"),
        (b"\x7fELF\x00\x01", [], "binary"),
        (b"name: caf\xe9\n", [], "not UTF-8"),
        (b"x: " + b"a" * (1 << 20), [], "KiB"),
        (GOOD_HEAD.encode() + b"name: b\n", [], "duplicate key 'name' (first on line 1)"),
        (GOOD_HEAD.encode() + b'env: {A: "x\\0y"}\n', [], "env.A: contains a NUL byte"),
        (GOOD_HEAD.encode() + b"env: {A: [1]}\n", [], "env.A: is a list"),
        (GOOD_HEAD.encode() + b"env: {A: }\n", [], "env.A: has no value"),
        (GOOD_HEAD.encode() + b"deadline_seconds: .inf\n", [], "deadline_seconds: at most 2,592,000 seconds"),
        (GOOD_HEAD.encode(), ["drain_seconds=1e30"], "drain_seconds: at most 86,400 seconds"),
        (GOOD_HEAD.encode(), ["stop_grace_seconds=.nan"], "stop_grace_seconds: at most 3,600 seconds"),
        (GOOD_HEAD.encode(), ["restart.backoff_seconds=1e30"], "restart.backoff_seconds: at most"),
        (GOOD_HEAD.encode(), ["roles.worker.replicas=100000"], "100,000 tasks is more than one job may have (2,000)"),
        (GOOD_HEAD.encode(), ['name="a\\n"'], "name: use lower-case"),
        (GOOD_HEAD.encode(), ["command=[python, true]"], 'quote it ("true")'),
    ],
)
def test_hostile_job_files_are_one_line_and_leave_nothing(
    tmp_path: Path, body: bytes, sets: list[str], expected: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_bytes(body)
    args = [a for s in sets for a in ("--set", s)]
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), str(job), *args, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_a_fifo_or_directory_as_job_file_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    for target, expected in ((fifo, "not a regular file"), (tmp_path, "is a directory")):
        proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), str(target), timeout=60)
        assert proc.returncode == 2 and expected in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_a_tfjob_container_without_command_is_refused_locally_with_the_way_out(tmp_path: Path) -> None:
    from tests.backends.k8s.test_k8s_tfjob import NO_COMMAND

    job = tmp_path / "tfjob.yaml"
    job.write_text(NO_COMMAND)
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), str(job))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "has no command" in proc.stderr and "--set command=" in proc.stderr
    assert not (tmp_path / "runs").exists()
    rendered = tfdist("render", str(job), "--as", "tfjob")
    assert rendered.returncode == 0 and "command:" not in rendered.stdout and "- '0150'" in rendered.stdout


LONG_NAME = "n" * 300  # over NAME_MAX (255) in one component
LONG_PATH = "/".join(["p" * 200] * 25)  # 5,000 characters: over PATH_MAX (4,096)


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--runs-dir", LONG_NAME, "a name in it is 300 bytes long, over the system's 255"),
        ("--runs-dir", LONG_PATH, "this system allows 4096 for a whole path"),
        ("--run-dir", LONG_NAME, "a name in it is 300 bytes long"),
        ("--run-dir", LONG_PATH, "this system allows 4096 for a whole path"),
    ],
)
def test_a_path_longer_than_the_system_allows_is_one_line(tmp_path: Path, flag: str, value: str, expected: str) -> None:
    proc = tfdist("run", "-q", flag, str(tmp_path / value), "--workers", "1", "--", "python", str(BIN / "ok.py"),
                  cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"tfdist: error: {flag}: " in proc.stderr and expected in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr) < 400  # the path is cut short in the message, not printed whole
    assert list(tmp_path.iterdir()) == []


def test_a_runs_root_that_leaves_no_room_for_a_run_directory_is_refused(tmp_path: Path) -> None:
    """Short enough to exist, too long for the run directory and its logs below it."""
    root = tmp_path
    while len(str(root)) < 4096 - 100:
        root = root / ("r" * min(200, 4096 - 100 - len(str(root)) - 1 or 1))
    proc = tfdist("run", "-q", "--runs-dir", str(root), "--workers", "1", "--", "python", str(BIN / "ok.py"),
                  cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "tfdist needs 128 of them below it" in proc.stderr and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


BIG = 140_000  # over MAX_ARG_STRLEN (131,072 bytes with 4 KiB pages)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (f'name: a\nroles: {{worker: 1}}\ncommand: [python, "{"a" * BIG}"]\n', "command[1]: 140,001 bytes"),
        (f'name: a\nroles: {{worker: {{replicas: 1, command: [python, "{"b" * BIG}"]}}}}\n',
         "roles.worker.command[1]: 140,001 bytes"),
        (f'name: a\nroles: {{worker: 1}}\ncommand: [python]\nenv: {{HUGE: "{"c" * BIG}"}}\n',
         "env.HUGE: 140,006 bytes"),
        (f'name: a\nroles: {{worker: {{replicas: 1, env: {{X: "{"d" * BIG}"}}}}}}\ncommand: [python]\n',
         "roles.worker.env.X: 140,003 bytes"),
    ],
)
def test_an_argument_over_the_kernel_limit_is_refused_up_front(
    tmp_path: Path, body: str, expected: str
) -> None:
    """The kernel would refuse the task's exec (E2BIG): a failed job, exit 1, on every
    restart. Refused before anything starts instead, naming the field."""
    job = tmp_path / "job.yaml"
    job.write_text(body)
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), str(job), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr[-500:]
    assert expected in proc.stderr and "MAX_ARG_STRLEN" in proc.stderr, proc.stderr[-500:]
    assert proc.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_arguments_and_environment_over_arg_max_are_refused_up_front(tmp_path: Path) -> None:
    """Each argument under the per-string limit, all of them together over ARG_MAX (a quarter
    of the stack limit: 512 KiB under `ulimit -s 2048`)."""
    job = tmp_path / "job.yaml"
    body = "name: a\nroles: {worker: 1}\ncommand: [python" + f', "{"e" * 100_000}"' * 6 + "]\n"
    job.write_text(body)
    cmd = " ".join(shlex.quote(a) for a in [*TFDIST, "run", "--runs-dir", str(tmp_path / "runs"), str(job)])
    proc = subprocess.run(["bash", "-c", f"ulimit -s 2048 && exec {cmd}"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "roles.worker: its command and environment come to about" in proc.stderr
    assert "(ARG_MAX)" in proc.stderr and proc.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


@pytest.mark.parametrize("kubeconfig", [None, "dir", "garbage: [\n", "fifo"])
def test_an_unreadable_kubeconfig_is_bad_input_and_leaves_nothing(tmp_path: Path, kubeconfig: str | None) -> None:
    """A FIFO as the kubeconfig blocked tfdist run forever in the client's open()."""
    pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed")
    config = tmp_path / "kubeconfig"
    if kubeconfig == "dir":
        config.mkdir()
    elif kubeconfig == "fifo":
        os.mkfifo(config)
    elif kubeconfig:
        config.write_text(kubeconfig)
    env = {"KUBECONFIG": str(config), "KUBERNETES_SERVICE_HOST": ""}
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), "--backend", "kubernetes", "--set",
                  "kubernetes.image=x/y:1", "--workers", "1", "--", "python", "train.py", cwd=tmp_path, env=env,
                  timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"kubernetes: cannot read the kubeconfig {config}" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


CONTROL = {*map(chr, range(32)), *map(chr, range(127, 160))} - {"\n"}


@pytest.mark.parametrize(
    ("args", "body", "expected"),
    [
        (["run", "job.yaml"], 'name: a\nroles: {worker: 1}\ncommand: ["no\\nsuch\\e[2J"]\n',
         "roles.worker.command: 'no\\nsuch\\x1b[2J' was not found"),
        (["run", "job.yaml"], 'name: a\nroles: {worker: 1}\ncommand: [python]\nworkdir: "x\\ny"\n',
         "x\\ny does not exist or is not a directory"),
        (["run", "a\nb\x1b]0;title\x07.yaml"], None, "a\\nb\\x1b]0;title\\x07.yaml: cannot read the job file"),
        (["run", "--backend", "a\nb", "--workers", "1", "--", "python"], None, "unknown backend 'a\\nb'"),
    ],
)
def test_control_characters_the_user_gave_are_echoed_escaped(
    tmp_path: Path, args: list[str], body: str | None, expected: str
) -> None:
    """A newline in a job file's value (or in a path or flag) made the error two lines, and an
    escape sequence from a job file reached the terminal (clear the screen, retitle the window,
    hide the message): what tfdist echoes is escaped as Python writes it."""
    if body is not None:
        (tmp_path / "job.yaml").write_text(body)
    proc = tfdist(*args, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("tfdist: error: ") and proc.stderr.count("\n") == 1, repr(proc.stderr)
    assert expected in proc.stderr and not CONTROL & set(proc.stderr), repr(proc.stderr)
    assert not (tmp_path / "runs").exists()


TFJOB_HEAD = ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n  tfReplicaSpecs:\n"
              "    Worker:\n      replicas: 1\n      template:\n        spec:\n")


def test_a_warning_with_a_newline_in_it_stays_one_line(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        TFJOB_HEAD + '          volumes: [{name: v}]\n          containers:\n'
        '          - {name: tensorflow, command: [no-such-program-xyz], volumeMounts: [{name: v, mountPath: "/d\\n\\e[2J"}]}\n')
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), "job.yaml", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    warning, error = proc.stderr.splitlines()
    assert warning.startswith("tfdist: warning: ") and "/d\\n\\x1b[2J" in warning
    assert error.startswith("tfdist: error: ") and not CONTROL & set(proc.stderr)


def test_an_error_quoting_a_huge_value_is_cut_to_a_readable_line(tmp_path: Path) -> None:
    """A TFJob's GPU count of 5,000 digits was echoed whole: a 5 KB line."""
    (tmp_path / "job.yaml").write_text(
        TFJOB_HEAD + "          containers:\n          - name: tensorflow\n            command: [python]\n"
        f"            resources: {{limits: {{nvidia.com/gpu: '{'9' * 5000}'}}}}\n")
    proc = tfdist("run", "--runs-dir", str(tmp_path / "runs"), "job.yaml", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[:300]
    assert "resources.nvidia.com/gpu: not a whole number" in proc.stderr and " ... " in proc.stderr
    assert len(proc.stderr) < 1100
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("kubernetes.namespace=Team_A", "kubernetes.namespace: 'Team_A' is not a Kubernetes namespace name"),
        ("kubernetes.namespace=" + "n" * 64, "kubernetes.namespace: 'nnnn"),
        ("kubernetes.namespace=a.b", "kubernetes.namespace: 'a.b' is not"),
        ('kubernetes.labels.x y="v"', "kubernetes.labels: 'x y' is not a Kubernetes label key"),
        ('kubernetes.node_selector.-a="v"', "kubernetes.node_selector: '-a' is not a Kubernetes label key"),
        (f'kubernetes.labels.{"k" * 64}="v"', "is not a Kubernetes label key"),
        ('kubernetes.labels.Ex_ample.com/a="v"', "'Ex_ample.com/a' is not a Kubernetes label key"),
    ],
)
def test_a_namespace_or_label_key_kubernetes_rejects_is_refused_before_anything(
    tmp_path: Path, setting: str, expected: str
) -> None:
    """The namespace went into every object's path and the tasks' hostnames, and a label key
    into every object, unchecked: the API refused the first object after the run directory
    was made (a failed run, exit 1, a directory and a record left)."""
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nroles: {worker: 1}\ncommand: [python, t.py]\nkubernetes: {image: 'x/y:1'}\n")
    for form in ("jobset", "tfjob", "jobs"):
        proc = tfdist("render", str(job), "--as", form, "--set", setting, cwd=tmp_path, timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert expected in proc.stderr and proc.stdout == "", proc.stderr
    pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed")
    config = tmp_path / "kubeconfig"  # a cluster that is never reached: refused before that
    config.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                      "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                      "current-context: x\n")
    proc = tfdist("run", "--backend", "kubernetes", "--runs-dir", str(tmp_path / "runs"), str(job), "--set", setting,
                  cwd=tmp_path, env={"KUBECONFIG": str(config), "KUBERNETES_SERVICE_HOST": ""}, timeout=120)
    assert proc.returncode == 2 and expected in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("fifo", "python.requirements_file: req is not a regular file"),
        ("/dev/zero", "python.requirements_file: /dev/zero is not a regular file"),
        ("latin-1", "python.requirements_file: req is not UTF-8 text (byte 0xe9 at offset 3)"),
    ],
)
def test_a_requirements_file_that_is_no_small_text_file_is_refused_without_blocking(
    tmp_path: Path, target: str, expected: str
) -> None:
    """The requirements file was read whole with read_text(): a FIFO blocked ``tfdist run``
    forever, /dev/zero grew it to 24 GB until the kernel killed it, and a byte that is not
    UTF-8 was a UnicodeDecodeError traceback. Run under a 2 GB address-space limit, so that
    a regression fails here instead of exhausting the machine's memory."""
    if target == "fifo":
        os.mkfifo(tmp_path / "req")
    elif target == "latin-1":
        (tmp_path / "req").write_bytes(b"caf\xe9\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nroles: {worker: 1}\ncommand: [python, t.py]\n"
                   f"python: {{requirements_file: {'req' if target != '/dev/zero' else target}}}\n")
    cmd = " ".join(shlex.quote(a) for a in [*TFDIST, "run", "--runs-dir", str(tmp_path / "runs"), str(job)])
    proc = subprocess.run(["bash", "-c", f"ulimit -v 2000000 && exec {cmd}"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr[-500:]
    assert expected in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr[-500:]
    assert not (tmp_path / "runs").exists()


def test_a_yarn_site_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """HADOOP_CONF_DIR/yarn-site.xml as a FIFO blocked tfdist run --backend yarn in open()."""
    (tmp_path / "conf").mkdir()
    os.mkfifo(tmp_path / "conf" / "yarn-site.xml")
    proc = tfdist("run", "--backend", "yarn", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--",
                  "python", "t.py", cwd=tmp_path, env={"HADOOP_CONF_DIR": str(tmp_path / "conf")}, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"HADOOP_CONF_DIR: cannot read {tmp_path / 'conf' / 'yarn-site.xml'} (not a regular file" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value", ["abc", "nan", "-5", "1e300"])
def test_a_bad_ray_placement_timeout_is_one_line(tmp_path: Path, value: str) -> None:
    """TFDIST_RAY_PLACEMENT_TIMEOUT went to float(): 'abc' was a ValueError traceback, and nan,
    a negative or an endless wait were taken as given."""
    proc = tfdist("run", "--backend", "ray", "--ray-address", "127.0.0.1:1", "--workers", "1", "--", "python",
                  cwd=tmp_path, env={"TFDIST_RAY_PLACEMENT_TIMEOUT": value}, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"TFDIST_RAY_PLACEMENT_TIMEOUT: '{value}' is not a number of seconds from 0 to 86,400" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--env", "A=caf\udce9"], ["--env", "\udcff=1"]])
def test_submit_refuses_text_its_job_file_cannot_carry(tmp_path: Path, args: list[str]) -> None:
    """A byte that is not UTF-8 (from the command line) is fine for run, but submit's detached
    run reads the job back from job.yaml, which cannot carry it: the job was accepted and
    then 'lost'. Refused up front, naming the field."""
    proc = tfdist("submit", "--runs-dir", str(tmp_path / "runs"), *args, "--workers", "1", "--", "python",
                  cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "tfdist: error: env." in proc.stderr and "not UTF-8 text" in proc.stderr and "tfdist run" in proc.stderr
    assert not (tmp_path / "runs").exists()


def _refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    assert proc.stderr.startswith("tfdist: error: ") and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "damaged" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_a_job_reference_that_cannot_name_a_job_is_one_line() -> None:
    """Bytes that are not UTF-8, 100,000 characters, a NUL or nothing: no job's id, refused in
    one line (exit 2); the store is not called damaged."""
    subprocess.run([*TFDIST, "list"], check=True, capture_output=True, timeout=120)  # the store exists
    for cmd in ("status", "logs", "stop", "metrics"):
        for ref in (b"\xff\xfejob", ("x" * 100_000).encode(), b""):
            proc = subprocess.run([*TFDIST, cmd, ref], capture_output=True, text=True, timeout=120)
            _refused(proc, "job '")


@pytest.mark.parametrize(
    ("store", "needle"),
    [
        ("postgresql://u@db.example:99999/jobs", "port 99999"),
        ("postgresql://u@db.example:abc/jobs", "port 'abc'"),
        ("postgresql://u@db.example:-1/jobs", "port '-1'"),
        ("postgresql://u@h1:5432,h2:x/jobs", "port 'x'"),
        ("postgresql://u@db.example/jobs?sslmode=sometimes", "sslmode 'sometimes'"),
        ("postgresql://u@[::1/jobs", "TFDIST_STORE"),
        ("postgresql://u@db.example/jobs?foo=bar", "invalid URI query parameter: \"foo\""),
        ("postgresql://u@db.example/jobs?port=abc", "port 'abc'"),  # a port given as a parameter
        ("postgresql://u@/jobs?host=/run/pg&port=70000", "port 70000"),
        ("postgresql://u@h1,h2/jobs?port=5432,x", "port 'x'"),
        ("postgresql://u@db.example/jobs?connect_timeout=soon", "connect_timeout 'soon'"),
        ("postgresql://u@db\udcff.example/jobs", "is not UTF-8 text"),  # was exit 1, a codec's error
    ],
)
def test_a_malformed_store_url_is_bad_input(store: str, needle: str) -> None:
    """Malformed settings were "the database server cannot be reached" (exit 1)."""
    for args in (["list"], ["run", "--workers", "1", "--", "python", "-c", "pass"]):
        proc = tfdist(*args, env={"TFDIST_STORE": store}, timeout=120)
        _refused(proc, "TFDIST_STORE", needle)
        assert "cannot be reached" not in proc.stderr


@pytest.mark.parametrize("flag", ["--spark-master", "--ray-address"])
def test_an_empty_cluster_flag_is_refused_not_the_default(tmp_path: Path, flag: str) -> None:
    """``--spark-master "$MASTER"`` with MASTER unset ran the job on this machine."""
    for cmd in ("run", "submit"):
        proc = subprocess.run([*TFDIST, cmd, "--runs-dir", str(tmp_path / "runs"), "--backend",
                               flag.split("-")[2], flag, "", "--workers", "1", "--", "python", "-c", "pass"],
                              capture_output=True, text=True, timeout=120)
        _refused(proc, f"{flag}: empty")
        assert not (tmp_path / "runs").exists()


def test_an_empty_runs_dir_is_refused_not_the_current_directory(tmp_path: Path) -> None:
    """``--runs-dir "$RUNS"`` with RUNS unset put the run directory in the current one."""
    for cmd in ("run", "submit"):
        for value in ("", " "):
            proc = subprocess.run([*TFDIST, cmd, "--runs-dir", value, "--workers", "1", "--", "python", "-c", "pass"],
                                  capture_output=True, text=True, timeout=120, cwd=tmp_path)
            _refused(proc, "--runs-dir: empty")
    assert list(tmp_path.iterdir()) == []  # nothing was made where it ran


def test_store_migrate_to_nothing_is_refused(tmp_path: Path) -> None:
    """``--to ''`` opened the current directory as a store."""
    subprocess.run([*TFDIST, "list"], check=True, capture_output=True, timeout=120)
    for flag in ("--to", "--from"):
        args = ["store", "migrate", "--to", str(tmp_path / "b.db")] if flag == "--from" else ["store", "migrate"]
        proc = tfdist(*args, flag, "", cwd=tmp_path, timeout=120)
        _refused(proc, f"{flag}: empty")
    assert os.listdir(tmp_path) == []


def test_logs_tail_must_not_be_negative() -> None:
    proc = tfdist("logs", "x", "--tail", "-1", timeout=120)
    _refused(proc, "--tail", "-1")


def test_logs_refuse_a_run_directory_tfdist_did_not_make(tmp_path: Path) -> None:
    """``tfdist logs`` reads a run directory by the dashboard's rule: a run directory replaced
    by a symbolic link to a directory tfdist did not make, a ``logs/`` or a log that is a
    link, are not followed (they were printed)."""
    from tfdist import runs
    from tfdist.jobs.store import Store
    from tfdist.states import JobState

    run_dir = runs.new_run_dir("j", tmp_path / "runs")
    (run_dir / runs.LOGS).mkdir()
    (run_dir / runs.LOGS / "worker-0.log").write_text("mine\n")
    Store().create_job("j", name="j", run_dir=str(run_dir), backend="local", state=JobState.SUCCEEDED,
                       max_restarts=0)
    from tfdist.jobs.store import op_task_transition
    from tfdist.states import TaskState
    from tfdist.supervisor.status import TaskStatus

    Store().write("update", op_task_transition("j", TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED), 1.0))
    proc = tfdist("logs", "j", timeout=120)
    assert proc.returncode == 0 and "mine" in proc.stdout, proc.stderr  # its own files are read
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / runs.LOGS).mkdir(parents=True)
    (elsewhere / runs.LOGS / "worker-0.log").write_text("SECRET\n")
    (tmp_path / "secret.txt").write_text("SECRET\n")
    # the log, then logs/, then the run directory itself, each a link to what tfdist did not make
    log = run_dir / runs.LOGS / "worker-0.log"
    log.unlink()
    log.symlink_to(tmp_path / "secret.txt")
    steps = [lambda: None,
             lambda: (log.unlink(), (run_dir / runs.LOGS).rmdir(),
                      (run_dir / runs.LOGS).symlink_to(elsewhere / runs.LOGS, target_is_directory=True)),
             lambda: (os.rename(run_dir, tmp_path / "moved"), run_dir.symlink_to(elsewhere, target_is_directory=True))]
    for step in steps:
        step()
        for args in (["logs", "j"], ["logs", "j", "--task", "worker-0"], ["logs", "j", "--tail", "5"]):
            proc = tfdist(*args, timeout=120)
            assert proc.returncode == 1 and "SECRET" not in proc.stdout, (args, proc.stdout, proc.stderr)
            assert proc.stderr.startswith("tfdist: error: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_a_closed_output_pipe_is_a_quiet_exit() -> None:
    """``tfdist list --json | head -1``: the reader closes the pipe early; no traceback."""
    from tfdist.jobs.store import Store
    from tfdist.states import JobState

    store = Store()
    for i in range(3000):  # more output than a pipe holds
        store.create_job(f"job-{i:05d}", name="j", run_dir=f"/r/{i}", backend="local", state=JobState.SUCCEEDED)
    for args in (["list", "--json"], ["list"]):
        with subprocess.Popen([*TFDIST, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.read(10)  # the reader takes what it wants ...
            proc.stdout.close()  # ... and goes, with most of the output unwritten
            err = proc.stderr.read().decode()
            code = proc.wait(120)
        assert err == "", err[-2000:]
        assert code in (0, 141), code


def test_output_that_cannot_be_written_is_one_line() -> None:
    """``tfdist list --json > /dev/full`` (or a file on a full disk) was an OSError traceback."""
    from tfdist.jobs.store import Store
    from tfdist.states import JobState

    if not Path("/dev/full").exists():
        pytest.skip("this system has no /dev/full (a device whose writes fail with ENOSPC)")
    store = Store()
    for i in range(300):  # more than the output's buffer: the write happens before the exit
        store.create_job(f"job-{i:05d}", name="j", run_dir=f"/r/{i}", backend="local", state=JobState.SUCCEEDED)
    for args in (["list", "--json", "--all"], ["list", "--all"], ["status", "job-00001"]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([*TFDIST, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        assert proc.returncode == 1, (args, proc.returncode, proc.stderr[-2000:])
        assert proc.stderr.startswith("tfdist: error: cannot write the output (No space left on device)"), proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_a_blank_tfdist_home_is_the_default_not_a_directory_named_by_spaces(tmp_path: Path) -> None:
    """``TFDIST_HOME=' '`` made a store in a directory named ' ' wherever tfdist ran."""
    from tfdist.home import home

    assert home({"TFDIST_HOME": " "}) == home({}) == home({"TFDIST_HOME": ""})
    fake_home = tmp_path / "user"
    proc = subprocess.run([*TFDIST, "list"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, TFDIST_HOME=" ", HOME=str(fake_home)))
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / " ").exists()
    assert (fake_home / ".tfdist" / "jobs.db").exists()  # the default store was the one used

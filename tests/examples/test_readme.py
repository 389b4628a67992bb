"""What the README, the docs pages and the examples' README show is what tfdist accepts (no
TensorFlow needed): the example jobs validate and are described, every YAML snippet in the
docs is a job file or a part of one that loads, every command line in the README parses, and
the README's links lead to files that exist."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tfdist.cli.parser import build_parser
from tfdist.jobspec import load
from tfdist.runs import MARKER
from tfdist.states import JobState

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"
README = ROOT / "README.md"
TFDIST = Path(sys.executable).parent / "tfdist"

#: What a snippet that shows one section of a job file is completed with, to be loaded.
MINIMAL_JOB = {"name": "snippet", "command": ["python", "train.py"], "roles": {"worker": 1}}


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def yaml_snippets() -> list[tuple[str, str]]:
    found = [(f"{page.name} #{i}", block)
             for page in sorted(DOCS.glob("*.md"))
             for i, block in enumerate(fenced(page.read_text(), "yaml"), 1)]
    assert found, "no YAML snippet found in docs/: the pattern or the pages moved"
    return found


def test_every_example_job_is_valid_and_described():
    readme = (EXAMPLES / "README.md").read_text()
    # run directories (tfdist-runs/, git-ignored) hold copies of jobs that ran from here
    files = sorted(p for p in EXAMPLES.rglob("*.yaml") if "tfdist-runs" not in p.parts)
    assert len(files) >= 6
    for job in files:
        name = job.relative_to(EXAMPLES).as_posix()
        assert name in readme, f"examples/README.md does not describe {name}"
        kind = (yaml.safe_load(job.read_text()) or {}).get("kind")
        if kind not in (None, "TFJob"):
            continue  # a Kubernetes object for users (the Role tfdist needs), not a job
        loaded = load.from_file(job)  # a job file that does not validate fails here
        assert Path(loaded.workdir).is_dir()


SNIPPETS = yaml_snippets()


@pytest.mark.parametrize(("where", "block"), SNIPPETS, ids=[where for where, _ in SNIPPETS])
def test_docs_yaml_snippets_load(where, block, tmp_path):
    """A whole job file (it has a name) loads as it is; a part of one (`python:`, `spark:`,
    `roles:` with a backend's section) loads inside a minimal job. Roles with parameter
    servers are loaded under the strategy that admits them: parameter_server with a chief
    (the job-file reference lists every role at once), none without."""
    data = yaml.safe_load(block)
    assert isinstance(data, dict), f"{where}: not a mapping"
    whole = "name" in data
    job = data if whole else {**MINIMAL_JOB, **data}
    (tmp_path / "requirements.txt").write_text("")  # named by the reference's python section
    path = tmp_path / "job.yaml"
    path.write_text(block if whole else yaml.safe_dump(job))
    roles = job["roles"]
    overrides = [] if "ps" not in roles or job.get("strategy") in ("parameter_server", "none") else \
        ["strategy=parameter_server" if "chief" in roles else "strategy=none"]
    loaded = load.from_file(path, overrides)  # an unknown or invalid field fails here, by name
    assert loaded.name == job["name"]


def commands(page: Path) -> list[list[str]]:
    """The `tfdist ...` lines of ``page``'s unlabelled fenced blocks, without `tfdist` and
    their comments (a line continued with a backslash is joined first)."""
    lines = [line.split("#", 1)[0].strip() for block in fenced(page.read_text(), "")
             for line in block.replace("\\\n", " ").splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("tfdist ")]


def readme_commands() -> list[list[str]]:
    found = commands(README)
    assert len(found) >= 4, "the README's first-job commands were not found"
    return found


@pytest.mark.parametrize("argv", readme_commands(), ids=" ".join)
def test_readme_commands_parse(argv):
    """Every `tfdist ...` line in the README is accepted by the real parser (a renamed or
    dropped option fails here); what follows `--` is the task's command, as in cli.main."""
    if "--" in argv:
        argv = argv[: argv.index("--")]
    args = build_parser().parse_args(argv)
    assert args.cmd == argv[0]


def test_readme_links_lead_to_files_and_headings():
    text = README.read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", text)
    local = [(target, anchor) for target, anchor in links if "://" not in target]
    assert len(local) >= 5, "the README should point at the docs pages"
    for target, anchor in local:
        path = ROOT / target
        assert path.is_file(), f"README links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, f"README links to {target}#{anchor}, a heading it does not have"


#: The backends whose README commands run in the group of the tests that have that cluster
#: up (tests/conftest.py's SHARED), by :func:`run_as_written`: ``make test`` stops the YARN
#: cluster after its group and starts no Spark or Ray cluster on the README's addresses, so
#: here they would only ever skip. Ray: tests/backends/ray/test_ray_jobs.py (head at
#: 127.0.0.1:6379); Spark standalone: tests/backends/spark/test_spark_jobs.py (master at
#: 127.0.0.1:7077); YARN, both lines: tests/backends/yarn/test_readme_yarn.py.
RUN_IN_THEIR_GROUP = ("ray", "spark", "yarn")


def backend_of(argv: list[str]) -> str:
    return argv[argv.index("--backend") + 1] if "--backend" in argv else "local"


def readme_runs(*backends: str, page: Path = README) -> list[list[str]]:
    """The `tfdist run` lines of the README (or of another ``page``) on ``backends`` (a test
    that expects some fails when none are found: the page or this pattern moved)."""
    found = [argv for argv in commands(page) if argv[0] == "run" and backend_of(argv) in backends]
    assert found, f"{page.name} shows no `tfdist run` line for {backends}"
    return found


def run_as_written(argv: list[str], tmp_path: Path, env: dict[str, str] | None = None,
                   timeout: float = 900, check: Callable[[Path], None] | None = None,
                   cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``tfdist ARGV`` exactly as the README writes it, from the repository's root (the quick
    form's `python train.py` from a directory that holds a train.py written for plain
    TF_CONFIG, as a user's would be), with this test's own TFDIST_HOME; it must exit 0.
    ``check`` is then given the job's run directory. As written, the run directory goes under
    the current directory (git-ignored tfdist-runs/), shared with the other groups' runs as
    written (pytest-xdist runs two at once): this run's are the ones whose marker names its
    tfdist's pid, and only those are checked and removed after it. ``cwd``: where a page's
    block has ``cd``-ed to before the line."""
    cwd = cwd or (EXAMPLES / "plain_tf_config" if "train.py" in argv else ROOT)
    full_env = {**os.environ, "TFDIST_HOME": os.environ.get("TFDIST_HOME", str(tmp_path / "home")), **(env or {})}
    proc = subprocess.Popen([str(TFDIST), *argv], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def own_runs() -> list[Path]:
        stamp = f" by pid {proc.pid}\n"
        return [run for run in (cwd / "tfdist-runs").glob("*")
                if (run / MARKER).is_file() and (run / MARKER).read_text().endswith(stamp)]

    try:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        assert out.returncode == 0, f"{' '.join(argv)}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        if check is not None:
            (run_dir,) = own_runs()
            check(run_dir)
    finally:
        for added in own_runs():
            shutil.rmtree(added, ignore_errors=True)
    return out


HERE_RUNS = [argv for argv in readme_commands() if argv[0] != "run" or backend_of(argv) not in RUN_IN_THEIR_GROUP]


@pytest.mark.integration
@pytest.mark.parametrize("argv", HERE_RUNS, ids=" ".join)
def test_readme_commands_run_as_written(argv, tmp_path):
    """Every `tfdist ...` line of the README but those of :data:`RUN_IN_THEIR_GROUP`, run
    exactly as written (:func:`run_as_written`); Kubernetes lines need a cluster and an image
    the test bed does not have, and skip (tests/backends/k8s runs the examples on its
    cluster)."""
    if argv[0] == "run" and backend_of(argv) != "local":
        pytest.skip(f"the {backend_of(argv)} backend needs a cluster and an image the test bed does not have")
    run_as_written(argv, tmp_path)


LOCAL_PAGE = DOCS / "local.md"


def first_run(page: Path) -> tuple[Path, list[list[str]]]:
    """The directory the page's first block ``cd``-s into, and its `tfdist` commands, one argv
    (without `tfdist`) for each command of a line (``a && b`` is two)."""
    lines = [line.split("#", 1)[0].strip() for line in fenced(page.read_text(), "")[0].splitlines()]
    where = next(line.split()[1] for line in lines if line.startswith("cd "))
    return ROOT / where, [shlex.split(part)[1:] for line in lines if line.startswith("tfdist ")
                          for part in line.split("&&")]


@pytest.mark.integration
def test_the_local_page_s_first_run_runs_as_written(tmp_path):
    """docs/local.md's first block, each command as written from the directory it enters (the
    venv is the one this suite runs in): the job file, the quick form, a detached submit
    that then succeeds with its label, the list naming it, and the dashboard serving its URL
    (it runs in the foreground: stopped once it answers)."""
    cwd, steps = first_run(LOCAL_PAGE)
    assert [argv[0] for argv in steps] == ["run", "run", "submit", "list", "ui"], steps  # the page moved
    for argv in steps[:2]:
        run_as_written(argv, tmp_path, cwd=cwd)

    def tfdist(*argv: str) -> subprocess.CompletedProcess[str]:  # the test's TFDIST_HOME (conftest)
        out = subprocess.run([str(TFDIST), *argv], cwd=cwd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"{' '.join(argv)}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        return out

    job = tfdist(*steps[2]).stdout.strip().splitlines()[-1]  # submit prints the job id last
    status: dict = {}
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status = json.loads(tfdist("status", job, "--json").stdout)
            if not JobState(status["state"]).active:
                break
            time.sleep(1)
        assert status["state"] == "succeeded", json.dumps(status)[:3000]
        assert status["labels"] == {"exp": "first"}, status
        assert job in tfdist(*steps[3]).stdout
        ui = subprocess.Popen([str(TFDIST), *steps[4]], cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        try:
            assert ui.stdout is not None
            url = next(line.split(": ", 1)[1].strip() for line in ui.stdout if "?token=" in line)
            browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # the token's cookie
            with browser.open(url, timeout=30) as page:
                assert page.status == 200 and status["name"] in page.read().decode()
        finally:
            ui.terminate()
            ui.wait(timeout=30)
    finally:
        if status.get("state") is None or JobState(status["state"]).active:
            subprocess.run([str(TFDIST), "stop", job], cwd=cwd, capture_output=True, timeout=120)
        if status.get("run_dir"):
            shutil.rmtree(status["run_dir"], ignore_errors=True)

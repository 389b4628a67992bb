"""Shared fixtures: paths to the tiny task programs and a runner for the real CLI."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "tests" / "bin"
TFDIST = [sys.executable, "-m", "tfdist.cli"]

#: Directories whose tests share one cluster or server of the session (the host bed, a Spark,
#: YARN or Ray cluster, the Kubernetes control plane, Chromium), or whose tests check that
#: cluster as a whole (no application left, every CPU free). Under pytest-xdist (``make test
#: TEST_WORKERS=2``) each runs as one group in one worker, one test after another; every
#: other module is a group of its own. Run before the rest: first the groups of the clusters
#: ``make test`` starts before the suite (:data:`STOPPED_AFTER`), then the others longest
#: first, so the workers start on the longest groups and the short modules fill in at the end.
SHARED = ("tests/backends/k8s/", "tests/backends/yarn/", "tests/hosts/", "tests/backends/spark/",
          "tests/backends/ray/", "tests/ui/")

#: The clusters ``make test`` starts before the suite (the control plane, YARN), by their
#: group: where ``TFDIST_TEST_STOP_CLUSTERS=1`` is set (``make test`` sets it) each is stopped
#: with its script's ``down`` once the last test of its group has run, so it does not idle
#: through the rest of the suite (together they keep ~9 % of a core busy doing nothing:
#: docs/developing.md). Without the variable a cluster a developer started stays up.
STOPPED_AFTER = {"tests/backends/k8s": ROOT / "kube" / "kube.sh", "tests/backends/yarn": ROOT / "yarn" / "yarn.sh"}


#: How many SHARED groups run at once, whatever the number of workers. Two cluster groups
#: beside each other leave about a quarter of the machine idle (they wait on their clusters:
#: node heartbeats, health checks, pod starts); a third worker fills it with the other
#: modules' jobs, while three cluster groups at once made every job wait on the others'
#: TensorFlow and JVMs (docs/developing.md).
CLUSTER_GROUPS_AT_ONCE = 2


def _is_cluster(group: str) -> bool:
    return group + "/" in SHARED


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _group(module: str) -> tuple[int, str]:
    """(rank, name) of the xdist group of the tests in ``module``: a SHARED directory's (its
    place in SHARED), else the module's own (ranked after them)."""
    for rank, prefix in enumerate(SHARED):
        if module.startswith(prefix):
            return rank, prefix.rstrip("/")
    return len(SHARED), module


if importlib.util.find_spec("xdist"):  # the hook exists only with pytest-xdist installed

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        """xdist's scope scheduling with a scope per group (:func:`_group`), not per module;
        its ``xdist_group`` marks are not read under pytest 9.2, whose node ids xdist can no
        longer rewrite."""
        from xdist.scheduler import LoadScopeScheduling

        class ByGroup(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return _group(nodeid.split("::", 1)[0])[1]

            def _assign_work_unit(self, node: Any) -> None:
                """The next group in order, but a SHARED one only while fewer than
                :data:`CLUSTER_GROUPS_AT_ONCE` other workers run one; else the next other
                group, or nothing yet (the worker waits for the end)."""
                others = sum(1 for other, units in self.assigned_work.items() if other is not node
                             and any(_is_cluster(scope) and not all(tests.values()) for scope, tests in units.items()))
                queued = list(self.workqueue)
                pick = next((s for s in queued if others < CLUSTER_GROUPS_AT_ONCE or not _is_cluster(s)), None)
                if pick is not None:
                    self.workqueue.move_to_end(pick, last=False)
                    super()._assign_work_unit(node)

        return ByGroup(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the groups: SHARED's first, in its order; then modules that start real jobs;
    then the rest (a plain ``pytest`` runs in the same order, in one process). Inside a group,
    the tests marked ``restarts_cluster`` (they stop or restart part of the group's shared
    cluster: a NodeManager, a DataNode, the NodeManagers with YARN's memory check on) run
    last, so the other tests of the group (one worker runs a group, one test after another)
    run on the cluster as it started, and nothing localized by the NodeManagers is lost
    before they are done."""
    heavy = {_module(item) for item in items if any(item.iter_markers(m) for m in ("integration", "chaos"))}

    def rank(item: pytest.Item) -> tuple[int, bool]:
        place, _ = _group(_module(item))
        group = place if place < len(SHARED) else place + (0 if _module(item) in heavy else 1)
        return group, item.get_closest_marker("restarts_cluster") is not None

    items.sort(key=rank)  # stable: the order inside a group stays


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of a :data:`STOPPED_AFTER` group (the next one is another group's,
    or none; pytest-xdist runs a test only once it knows the next), stop that group's cluster."""
    if os.environ.get("TFDIST_TEST_STOP_CLUSTERS") != "1":
        return
    group = _group(_module(item))[1]
    if group in STOPPED_AFTER and (nextitem is None or _group(_module(nextitem))[1] != group):
        subprocess.run([str(STOPPED_AFTER[group]), "down"], cwd=ROOT, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)


@pytest.fixture(scope="session")
def _shared_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lib")


@pytest.fixture(scope="session")
def _shared_spark_yarn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-yarn")


@pytest.fixture(scope="session", autouse=True)
def _quick_jvms(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Every Spark JVM of the session (daemons, drivers, executors, YARN AMs) starts with
    the client compiler and the serial collector (``spark_cluster.quick_jvm_environ``): set before
    any cluster fixture, for every process the tests start."""
    from tests.backends.spark.spark_cluster import quick_jvm_environ

    with pytest.MonkeyPatch.context() as patch:
        for key, value in quick_jvm_environ(tmp_path_factory.mktemp("jvm")).items():
            patch.setenv(key, value)
        yield


@pytest.fixture(autouse=True)
def _tfdist_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                 _shared_lib: Path, _shared_spark_yarn: Path) -> None:
    """Every test gets its own job store, so tests never see each other's jobs. The built
    bind interposer (``lib/``) is shared, so it is compiled once per session, not per job;
    tests of the build itself use a home of their own. So is the archive of Spark's jars
    staged for YARN (``spark-yarn/``, ~420 MB, which the NodeManagers then localize once)."""
    home = tmp_path_factory.mktemp("home")
    (home / "lib").symlink_to(_shared_lib, target_is_directory=True)
    (home / "spark-yarn").symlink_to(_shared_spark_yarn, target_is_directory=True)
    monkeypatch.setenv("TFDIST_HOME", str(home))


@functools.cache
def index_reachable() -> bool:
    """Can this machine reach the package index (PyPI, or PIP_INDEX_URL's host)?"""
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("PIP_INDEX_URL") or os.environ.get("UV_INDEX_URL") or "https://pypi.org/simple")
    try:
        with socket.create_connection((url.hostname or "pypi.org", url.port or 443), timeout=5):
            return True
    except OSError:
        return False


@pytest.fixture
def package_index() -> None:
    """Tests that install real packages from the index skip, saying why, when it is unreachable."""
    if not index_reachable():
        pytest.skip("the package index is unreachable (these tests install real packages)")


def tfdist(*args: str, cwd: Path | None = None, timeout: float = 240, env: dict | None = None):
    """Run the real CLI as a subprocess and return the CompletedProcess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [*TFDIST, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env
    )


def plain_and_summary(out: str, err: str) -> tuple[str, dict]:
    """What a ``tfdist run --json`` without ``--quiet`` printed: its plain lines, then its JSON
    summary; without a summary the test fails, showing the ends of the output."""
    plain, _, rest = out.rpartition("\n{\n")
    if not rest.strip():
        pytest.fail(f"no summary: {out[-2000:]} {err[-2000:]}")
    return plain, json.loads("{\n" + rest)


def summary(proc: subprocess.CompletedProcess) -> dict:
    """The JSON summary ``tfdist run --json`` printed; without one the test fails, showing the
    exit code and the ends of the output."""
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON summary (rc={proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-3000:]}")


def tasks(result: dict) -> dict[str, dict]:
    """A summary's tasks by name."""
    return {t["name"]: t for t in result["tasks"]}


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines record (events.jsonl, progress.jsonl) that may still be written:
    a missing file is empty and a half-written last line is skipped."""
    rows: list[dict] = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    return rows


def task_envs(run_dir: str | Path) -> dict[str, dict]:
    """Each task's environment as printed by tests/bin/print_tf_config.py (an ``ENV {json}``
    line in its log), by task name."""
    envs = {}
    for log in (Path(run_dir) / "logs").glob("*.log"):
        line = next(ln for ln in log.read_text().splitlines() if ln.startswith("ENV "))
        envs[log.stem] = json.loads(line[4:])
    return envs


def alive(pid: int) -> bool:
    """Running, not a zombie (an orphan's exit status waits for whoever reaps it)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def still_alive(pids: list[int], wait: float) -> list[int]:
    """The pids still running after up to ``wait`` seconds (zombies count as gone)."""
    import time

    deadline = time.monotonic() + wait
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def start_hang_job(backend_args: list[str], runs: Path, name: str, cwd: Path, timeout: float):
    """``tfdist run`` of two tasks of tests/bin/hang.py (each with a grandchild) on a backend
    (``backend_args`` name it and ``--runs-dir runs``), once both have logged their pids;
    returns (the CLI's Popen, the four pids)."""
    import time

    cli = subprocess.Popen(
        [*TFDIST, "run", "--quiet", *backend_args, "--workers", "2", "--name", name, "--",
         sys.executable, str(BIN / "hang.py")],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    pids: list[int] = []
    deadline = time.monotonic() + timeout
    while len(pids) < 4 and time.monotonic() < deadline and cli.poll() is None:
        pids = []
        for log in runs.glob(f"{name}-*/logs/worker-*.log"):
            for line in log.read_text().splitlines():
                if " pid " in line and " child " in line:
                    words = line.split()
                    pids += [int(words[2]), int(words[4])]
        time.sleep(0.2)
    assert len(pids) == 4, f"the tasks never ran: {cli.poll()}"
    return cli, pids


def running_pid(cli: subprocess.Popen, runs: Path, name: str, task: str, timeout: float) -> int:
    """The pid of ``task`` once job ``name`` (run by ``cli`` with ``--runs-dir runs``) records it
    running; the test fails if that does not happen within ``timeout`` s or the CLI ends first."""
    import time

    pid = None
    deadline = time.monotonic() + timeout
    while pid is None and time.monotonic() < deadline and cli.poll() is None:
        for events in runs.glob(f"{name}-*/events.jsonl"):
            for row in read_jsonl(events):
                if row["task"] == task and row["state"] == "running":
                    pid = row["pid"]
        time.sleep(0.2)
    assert pid, f"{task} never ran: {cli.poll()}"
    return int(pid)


@pytest.fixture(scope="session")
def host_bed():
    """The multi-host test bed (tests/hosts/testbed.py): hosts h0-h3, each a network
    namespace with its own address on one private bridge, shared by every multi-host test of
    the session and torn down at its end. Skips, saying why, where it cannot be made (not
    root, no iproute2, a kernel without network namespaces). A test that makes faults calls
    ``host_bed.restore()`` when done; one that starts processes ends them."""
    from tests.hosts import testbed

    why = testbed.unavailable()
    if why:
        pytest.skip(why)
    bed = testbed.HostBed.start(4)
    try:
        yield bed
    finally:
        bed.close()


@pytest.fixture(scope="session")
def postgres_server():  # type: ignore[no-untyped-def]
    """A real PostgreSQL server on 127.0.0.1 for the session (tests/postgres_server.py);
    skips, saying why, only where none can be started (.ci/run installs Debian's)."""
    from tests import postgres_server as pg

    reason = pg.unavailable()
    if reason:
        pytest.skip(reason)
    with pg.running_server() as server:
        yield server


@pytest.fixture
def postgres_store(postgres_server, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A new, empty PostgreSQL database as this test's job store (``TFDIST_STORE``, so the
    CLI in subprocesses uses it too); dropped after the test."""
    import uuid

    name = f"t_{uuid.uuid4().hex[:12]}"
    url = postgres_server.create_database(name)
    monkeypatch.setenv("TFDIST_STORE", url)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Run a store test against both stores: SQLite under this test's TFDIST_HOME, and a
    fresh database on the session's real PostgreSQL server."""
    if request.param == "postgresql":
        request.getfixturevalue("postgres_store")
    return str(request.param)


#: Root reads any file through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: without them (both
#: dropped from the bounding and inheritable sets, so the program run as root never gets
#: them) file modes apply to root as to anyone. An unprivileged user would not do here: the
#: interpreter may live under root's home.
NO_DAC = ["--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


def where_modes_bind(argv: list[str]) -> list[str]:
    """``argv`` as this user, or, as root, as root without the capabilities that override
    file modes (util-linux's setpriv), so that a test of an unreadable file runs in CI (as
    root) too instead of skipping."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("runs as root and util-linux's setpriv is missing (it drops root's file-mode override)")
    return [setpriv, *NO_DAC, *argv]

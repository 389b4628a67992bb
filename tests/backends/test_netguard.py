"""The bind interposer that keeps a local task's port on loopback, and how tfdist builds it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tfdist import contract
from tfdist.backends import netguard
from tfdist.errors import SpecError

needs_cc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or netguard.find_compiler(os.environ)[0] is None,
    reason="the interposer is built only on Linux with a C compiler (none here)",
)

# Binds each (family, host, port) given on the command line and prints what the kernel bound.
SERVER = """
import json, socket, sys
out = []
for fam, host, port in json.loads(sys.argv[1]):
    s = socket.socket(getattr(socket, fam))
    s.bind((host, port))
    s.listen()
    out.append(s.getsockname()[0])
print(json.dumps(out))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bound(library: str, listed: str, binds: list[tuple[str, str, int]]) -> list[str]:
    env = {**os.environ, "LD_PRELOAD": library, contract.LOOPBACK_PORTS: listed}
    done = subprocess.run([sys.executable, "-c", SERVER, json.dumps(binds)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# -- the library on plain Python sockets ------------------------------------------------------


def test_wildcard_bind_of_a_listed_port_becomes_loopback(library: str) -> None:
    p4, p6 = free_port(), free_port()
    binds = [("AF_INET", "0.0.0.0", p4)]
    if socket.has_ipv6:
        binds.append(("AF_INET6", "::", p6))
    got = bound(library, f"{p4},{p6}", binds)
    assert got[0] == "127.0.0.1"
    if socket.has_ipv6:
        assert got[1] == "::ffff:127.0.0.1"  # dual-stack: IPv4 clients of 127.0.0.1 still reach it


def test_ports_not_listed_and_specific_addresses_are_left_alone(library: str) -> None:
    listed, other = free_port(), free_port()
    binds = [("AF_INET", "0.0.0.0", other), ("AF_INET", "127.0.0.2", listed), ("AF_INET", "0.0.0.0", 0)]
    assert bound(library, str(listed), binds) == ["0.0.0.0", "127.0.0.2", "0.0.0.0"]
    assert bound(library, "", [("AF_INET", "0.0.0.0", other)]) == ["0.0.0.0"]


def test_a_listed_port_is_reachable_on_loopback_only(library: str) -> None:
    port = free_port()
    code = f"""
import socket, sys
s = socket.socket(socket.AF_INET6); s.bind(("::", {port})); s.listen()
socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
print("loopback ok", flush=True)
"""
    env = {**os.environ, "LD_PRELOAD": library, contract.LOOPBACK_PORTS: str(port)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "loopback ok", done.stderr


# -- building and caching ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _built_on_first_use(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """These tests see an installation whose install-time build did not run (the module-scoped
    ``library`` is made before this, with the real one)."""
    monkeypatch.setattr(netguard, "PACKAGED", tmp_path_factory.mktemp("package") / "loopback-bind.so")


def test_the_library_built_at_install_is_used_with_no_compiler_and_nothing_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packaged = tmp_path / "loopback-bind.so"
    packaged.write_bytes(b"\x7fELF")
    monkeypatch.setattr(netguard, "PACKAGED", packaged)
    guard = netguard.prepare({}, {"CC": "/nonexistent/cc"}, tmp_path / "home")
    assert guard == netguard.NetGuard(str(packaged))
    assert not (tmp_path / "home").exists()  # no build on first use
    # the opt-out and the platform checks still come first
    assert netguard.prepare({"TFDIST_EXPOSE_PORTS": "1"}, {}, tmp_path / "home") == netguard.NetGuard(None)
    assert netguard.prepare({}, {}, tmp_path / "home", host="10.0.0.1").library is None


def test_an_install_builds_the_library_into_the_package_under_a_name_no_import_reaches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """setup.py's build_ext (what pip runs at install) on the real source: the plain shared
    library netguard.PACKAGED names (no Python ABI suffix), and it works."""
    import runpy

    setuptools = pytest.importorskip("setuptools", reason="the install-time build needs setuptools")
    if netguard.find_compiler(os.environ)[0] is None or not sys.platform.startswith("linux"):
        pytest.skip("no C compiler here: the install skips the optional build")
    root = Path(__file__).resolve().parents[2]
    setup = runpy.run_path(str(root / "setup.py"), run_name="tfdist_setup")
    monkeypatch.chdir(root)  # the extension's source path is relative to the project
    dist = setuptools.Distribution({"name": "t", "ext_modules": [setup["EXTENSION"]],
                                    "cmdclass": {"build_ext": setup["BuildInterposer"]}})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib, cmd.build_temp = str(tmp_path / "lib"), str(tmp_path / "tmp")
    cmd.ensure_finalized()
    cmd.run()
    built = tmp_path / "lib" / "tfdist" / "backends" / netguard.PACKAGED.name
    assert [p.name for p in built.parent.iterdir()] == [built.name]
    netguard.self_test(built)  # moves a wildcard bind, sets the death signal (raises if not)


@needs_cc
def test_built_once_then_reused_and_concurrent_builds_are_safe(tmp_path: Path) -> None:
    guards: list[netguard.NetGuard] = []
    threads = [threading.Thread(target=lambda: guards.append(netguard.prepare({}, {}, tmp_path)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {g.library for g in guards} == {guards[0].library} and guards[0].library
    lib = Path(guards[0].library)
    assert [p.name for p in (tmp_path / "lib").iterdir()] == [lib.name]  # no temporary left
    mtime = lib.stat().st_mtime_ns
    assert netguard.prepare({}, {"CC": "/nonexistent/cc"}, tmp_path).library == str(lib)
    assert lib.stat().st_mtime_ns == mtime  # cached: no compiler needed the second time


def test_library_name_is_keyed_on_source_and_machine(tmp_path: Path) -> None:
    a = netguard.library_path(tmp_path, b"src", "linux-x86_64-glibc2.36")
    assert a == netguard.library_path(tmp_path, b"src", "linux-x86_64-glibc2.36")
    assert a != netguard.library_path(tmp_path, b"src2", "linux-x86_64-glibc2.36")
    assert a != netguard.library_path(tmp_path, b"src", "linux-aarch64-glibc2.36")
    assert a.parent == tmp_path / "lib"


def test_no_compiler_or_a_failed_build_runs_open_with_one_warning(tmp_path: Path) -> None:
    missing = netguard.prepare({}, {"CC": "/nonexistent/cc"}, tmp_path)
    assert missing.library is None and missing.warning
    assert "reachable from the network" in missing.warning and "CC (/nonexistent/cc)" in missing.warning
    assert "TFDIST_EXPOSE_PORTS=1" in missing.warning and "\n" not in missing.warning
    assert missing.task_env("127.0.0.1:5000", {}) == {}
    failed = netguard.prepare({}, {"CC": shutil.which("false") or "false"}, tmp_path)
    assert failed.library is None and failed.warning and "failed" in failed.warning
    assert not list((tmp_path / "lib").iterdir())  # nothing half-built left behind


def test_a_missing_source_warns_instead_of_failing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netguard, "SOURCE", tmp_path / "gone.c")
    guard = netguard.prepare({}, {}, tmp_path)
    assert guard.library is None and guard.warning and "reinstall tfdist" in guard.warning


def test_opt_out_and_its_bad_values() -> None:
    assert netguard.opted_out({"TFDIST_EXPOSE_PORTS": "1"}, {})
    assert not netguard.opted_out({"TFDIST_EXPOSE_PORTS": "1"}, {"TFDIST_EXPOSE_PORTS": "0"})  # job wins
    assert netguard.opted_out({}, {"TFDIST_EXPOSE_PORTS": "true"})
    assert not netguard.opted_out({}, {})
    with pytest.raises(SpecError, match="TFDIST_EXPOSE_PORTS: expected 1 or 0"):
        netguard.opted_out({"TFDIST_EXPOSE_PORTS": "maybe"}, {})
    assert netguard.prepare({"TFDIST_EXPOSE_PORTS": "1"}, {"CC": "/nonexistent/cc"}) == netguard.NetGuard(None)


# -- what a task gets -------------------------------------------------------------------------


def test_task_env_prepends_to_the_jobs_own_preload() -> None:
    assert netguard.guard_env("/l/g.so", "127.0.0.1:2345", {}) == {
        "LD_PRELOAD": "/l/g.so", "TFDIST_LOOPBACK_PORTS": "2345"}
    assert netguard.guard_env("/l/g.so", "127.0.0.1:2345", {"LD_PRELOAD": "/x/mine.so"})[
        "LD_PRELOAD"] == "/l/g.so:/x/mine.so"
    # the evaluator serves nothing: no ports, but the library (its parent-death signal)
    assert netguard.guard_env("/l/g.so", None, {}) == {"LD_PRELOAD": "/l/g.so"}
    assert netguard.guard_env(None, "127.0.0.1:2345", {}) == {}

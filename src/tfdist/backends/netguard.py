"""Keep a local job's task ports off the network.

TensorFlow's gRPC server binds every interface (``0.0.0.0`` / ``[::]``) whatever TF_CONFIG
says, and it has no authentication: whoever reaches the machine can run ops in a task and
read or write its files. A local job's tasks only ever talk to each other over loopback, so
tfdist preloads a tiny ``bind()`` interposer into each task that has a port
(``loopback_bind.c``, shipped with the package): a wildcard bind of *that task's own port*
becomes a loopback bind; every other bind in the task is left alone.

Why this route (measured, see the README's Security section): it needs no privileges, and
costs nothing measurable per step (2-worker MWMS ``fit`` at full speed) or per task start.
A private network namespace (``unshare``) closes everything, but needs unprivileged user
namespaces (off on some distributions, blocked by default in Docker), cuts the tasks off the outside
network unless a user-space network stack is added, and makes every task of a job share one
namespace; firewall rules and cgroup BPF bind hooks need root.

The library is compiled with the system C compiler on first use into
``$TFDIST_HOME/lib/`` under a name keyed on the source and the machine, to a temporary name
then renamed, so concurrent jobs never see half a file. It is tried once on a real socket
before it is trusted. Where it cannot be had (not Linux, no compiler, a failed build) the job
still runs, and :attr:`NetGuard.warning` is the one loud line tfdist prints at start. Set
``TFDIST_EXPOSE_PORTS=1`` (in tfdist's environment or the job's ``env``) to opt out.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tfdist.contract import EXPOSE_PORTS, LOOPBACK_PORTS
from tfdist.errors import SpecError

SOURCE = Path(__file__).with_name("loopback_bind.c")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}
_COMPILERS = ("cc", "gcc", "clang")


@dataclass(frozen=True)
class NetGuard:
    """What the local backend does for each task's network exposure.

    ``library`` is the built interposer (None: ports stay reachable); ``warning`` is the one
    line to print at start when they stay reachable and the user did not choose that.
    """

    library: str | None
    warning: str | None = None

    def task_env(self, address: str | None, env: Mapping[str, str]) -> dict[str, str]:
        """Additions to a task's final environment ``env`` (see :func:`guard_env`)."""
        return guard_env(self.library, address, env)


def guard_env(library: str | None, address: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """The variables that keep the task at ``address`` (``host:port``) on loopback.

    Nothing for a task without an address (the evaluator serves nothing) or without a
    library. Ours goes first in ``LD_PRELOAD`` so its ``bind`` is the one the task calls; it
    hands every call on to the next ``bind`` (the job's own preloads, then libc).
    """
    if library is None or address is None:
        return {}
    port = address.rpartition(":")[2]
    preload = env.get("LD_PRELOAD", "").strip()
    return {
        "LD_PRELOAD": f"{library}:{preload}" if preload else library,
        LOOPBACK_PORTS: port,
    }


def opted_out(environ: Mapping[str, str], job_env: Mapping[str, str]) -> bool:
    """True when the user asked for reachable ports; the job's ``env`` wins over tfdist's."""
    raw = job_env.get(EXPOSE_PORTS, environ.get(EXPOSE_PORTS, ""))
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SpecError(f"{EXPOSE_PORTS}: expected 1 or 0 (got {raw!r}); 1 leaves task ports open to the network")


def library_path(home: Path, source: bytes, machine: str) -> Path:
    """Where the library built from ``source`` for ``machine`` is cached."""
    key = hashlib.sha256(source + b"\0" + machine.encode()).hexdigest()[:16]
    return home / "lib" / f"loopback_bind-{key}.so"


def machine_key() -> str:
    """What a built library depends on besides its source: OS, architecture, C library."""
    libc, version = platform.libc_ver()
    return f"{sys.platform}-{platform.machine()}-{libc}{version}"


def find_compiler(environ: Mapping[str, str]) -> tuple[str | None, str]:
    """``$CC`` if set, else the first of cc, gcc, clang on PATH; or None and why not."""
    named = environ.get("CC", "").strip()
    if named:
        if shutil.which(named.split()[0]):
            return named, ""
        return None, f"the C compiler named in CC ({named}) was not found"
    found = next((c for c in _COMPILERS if shutil.which(c)), None)
    return found, "" if found else "no C compiler (cc, gcc or clang) was found"


def build(compiler: str, dest: Path) -> None:
    """Compile the interposer to ``dest`` atomically; raise ``RuntimeError`` saying why not."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        cmd = [*compiler.split(), "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SOURCE), "-ldl"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise RuntimeError(f"{compiler} could not run: {err}") from None
        if done.returncode != 0:
            first = next((ln for ln in done.stderr.splitlines() if ln.strip()), "no output")
            raise RuntimeError(f"{compiler} failed (exit {done.returncode}): {first.strip()}")
        self_test(tmp)
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


_PROBE = "import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEPORT,1);" \
         "s.bind(('0.0.0.0',int(sys.argv[1])));print(s.getsockname()[0])"


def self_test(library: Path) -> None:
    """Trust a freshly built library only once a preloaded Python moved a wildcard bind."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(("0.0.0.0", 0))
        port = str(held.getsockname()[1])
        env = {**os.environ, "LD_PRELOAD": str(library), LOOPBACK_PORTS: port}
        try:
            done = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE, port], env=env,
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise RuntimeError(f"the built library could not be tried: {err}") from None
    if done.stdout.strip() != "127.0.0.1":
        said = (done.stdout + done.stderr).strip().splitlines() or ["no output"]
        raise RuntimeError(f"the built library did not move a wildcard bind ({said[-1]})")


def warning_text(reason: str, remedy: str) -> str:
    """The one loud line for a job whose task ports stay open."""
    return (
        "tfdist: WARNING: this job's TensorFlow ports are reachable from the network, and "
        "TensorFlow's gRPC has no authentication (whoever reaches this machine can run code in "
        f"a task): {reason}. To close them: {remedy}. To accept this and silence the warning: "
        f"{EXPOSE_PORTS}=1."
    )


def prepare(
    job_env: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    host: str = "127.0.0.1",
) -> NetGuard:
    """Find or build the interposer for a job; a guard with a warning when it cannot be had.

    Raises :class:`SpecError` only for a malformed ``TFDIST_EXPOSE_PORTS``.
    """
    environ = os.environ if environ is None else environ
    if opted_out(environ, job_env):
        return NetGuard(None)
    if not sys.platform.startswith("linux"):
        return NetGuard(None, warning_text(
            f"tfdist can keep them on loopback only on Linux (this is {sys.platform})",
            "block the ports in this machine's firewall, or run on Linux"))
    if not host.startswith("127."):
        return NetGuard(None, warning_text(
            f"tasks use the address {host}, not loopback", "block the ports in this machine's firewall"))
    try:
        source = SOURCE.read_bytes()
    except OSError as err:
        return NetGuard(None, warning_text(
            f"the interposer's source is missing from tfdist's installation ({err.strerror})",
            "reinstall tfdist"))
    home = home or Path(environ.get("TFDIST_HOME") or Path.home() / ".tfdist").expanduser()
    dest = library_path(home, source, machine_key())
    if dest.is_file():
        return NetGuard(str(dest))
    compiler, why_not = find_compiler(environ)
    if compiler is None:
        return NetGuard(None, warning_text(
            f"{why_not} to build tfdist's bind interposer",
            "install one (e.g. apt-get install gcc) or name it in CC; the next job builds it"))
    try:
        build(compiler, dest)
    except (OSError, RuntimeError) as err:
        return NetGuard(None, warning_text(
            f"building tfdist's bind interposer into {dest.parent} failed: {err}",
            "fix the cause above (a working C compiler, a writable $TFDIST_HOME)"))
    return NetGuard(str(dest))

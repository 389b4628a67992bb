"""Keep a local job's task ports off the network.

TensorFlow's gRPC server binds every interface (``0.0.0.0`` / ``[::]``) whatever TF_CONFIG
says, and it has no authentication: whoever reaches the machine can run ops in a task and
read or write its files. A local job's tasks only ever talk to each other over loopback, so
tfdist preloads a tiny ``bind()`` interposer into each task that has a port
(``loopback_bind.c``, shipped with the package): a wildcard bind of *that task's own port*
becomes a loopback bind; every other bind in the task is left alone. The same library gives
the task its parent-death signal (PR_SET_PDEATHSIG, see ``loopback_bind.c`` and procs.py),
which saves an exec of ``setpriv`` per task, when :func:`preload_reaches` the task's program.

Why this route (measured, see the README's Security section): it needs no privileges, and
costs nothing measurable per step (2-worker MWMS ``fit`` at full speed) or per task start.
A private network namespace (``unshare``) closes everything, but needs unprivileged user
namespaces (off on some distributions, blocked by default in Docker), cuts the tasks off the outside
network unless a user-space network stack is added, and makes every task of a job share one
namespace; firewall rules and cgroup BPF bind hooks need root.

The library is built when tfdist is installed (``setup.py``: an optional extension, so an
install without a C compiler still succeeds) into the package, as :data:`PACKAGED`, and used
from there. An installation without it (installed where no compiler was) compiles it with
the system C compiler on first use instead, into ``$TFDIST_HOME/lib/`` under a name keyed on
the source and the machine, to a temporary name then renamed, so concurrent jobs never see
half a file; that build is tried once on a real socket before it is trusted. So a compiler
installed after tfdist gives the next job its guard without a reinstall. Where neither can
be had (not Linux, no compiler, a failed build) the job still runs, and
:attr:`NetGuard.warning` is the one loud line tfdist prints at start. Set
``TFDIST_EXPOSE_PORTS=1`` (in tfdist's environment or the job's ``env``) to opt out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tfdist.contract import EXPOSE_PORTS, LOOPBACK_PORTS
from tfdist.errors import SpecError
from tfdist.home import home as tfdist_home
from tfdist.node.procs import PARENT_VAR

SOURCE = Path(__file__).with_name("loopback_bind.c")
#: The library built at install (setup.py's BuildInterposer); absent when that build could not run.
PACKAGED = Path(__file__).with_name("loopback-bind.so")
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

    Nothing without a library. A task without an address (the evaluator serves nothing) gets
    the library without ports: every bind passes through, and it still sets the task's
    parent-death signal. Ours goes first in ``LD_PRELOAD`` so its ``bind`` is the one the task
    calls; it hands every call on to the next ``bind`` (the job's own preloads, then libc).
    """
    if library is None:
        return {}
    preload = env.get("LD_PRELOAD", "").strip()
    added = {"LD_PRELOAD": f"{library}:{preload}" if preload else library}
    if address is not None:
        added[LOOPBACK_PORTS] = address.rpartition(":")[2]
    return added


_PT_INTERP = 3
_SHEBANG_DEPTH = 4  # Linux follows at most this many interpreter scripts


def elf_kind(handle: BinaryIO) -> tuple[tuple[int, int, int], bool] | None:
    """An ELF file's (class, byte order, machine), and whether its program headers name a
    dynamic loader (PT_INTERP; a static binary has none); None when it is not ELF."""
    handle.seek(0)
    head = handle.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    order = "<" if head[5] == 1 else ">"
    (machine,) = struct.unpack_from(order + "H", head, 18)
    wide = head[4] == 2  # 64-bit: wider fields, further on
    (phoff,) = struct.unpack_from(order + ("Q" if wide else "I"), head, 32 if wide else 28)
    entsize, count = struct.unpack_from(order + "HH", head, 54 if wide else 42)
    handle.seek(phoff)
    table = handle.read(min(entsize * count, 65536))
    dynamic = entsize >= 4 and any(
        struct.unpack_from(order + "I", table, i)[0] == _PT_INTERP for i in range(0, len(table) - 3, entsize))
    return (head[4], head[5], machine), dynamic


def preload_reaches(program: str, library: str, depth: int = 0) -> bool:
    """True when the dynamic loader will load ``library`` (LD_PRELOAD) into ``program`` (a
    path), so the library's constructor runs in the task: a dynamically linked ELF of the
    library's class and machine, or a script whose interpreter is one. False for a static
    binary (no loader), a setuid/setgid or file-capability binary (the loader ignores
    LD_PRELOAD there, and the kernel clears the parent-death signal anyway), another
    architecture, or anything unreadable: the caller then sets the signal with ``setpriv``."""
    try:
        info = os.stat(program)
        if info.st_mode & (stat.S_ISUID | stat.S_ISGID) or not stat.S_ISREG(info.st_mode):
            return False
        with contextlib.suppress(OSError):
            os.getxattr(program, "security.capability")
            return False
        with open(program, "rb") as handle:
            head = handle.read(256)
            if head[:2] == b"#!":
                words = head[2:].split(b"\n", 1)[0].split()
                return bool(words) and depth < _SHEBANG_DEPTH and preload_reaches(
                    os.fsdecode(words[0]), library, depth + 1)
            kind = elf_kind(handle)
        with open(library, "rb") as handle:
            own = elf_kind(handle)
        return kind is not None and kind[1] and own is not None and own[0] == kind[0]
    except (OSError, struct.error):
        return False


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
    """Where the library built from ``source`` for ``machine`` is cached.

    The key tells builds apart; it is no defence (whoever can write ``$TFDIST_HOME`` can
    replace the library under any name), so a CRC with the length serves, and ``zlib`` is
    already loaded where ``hashlib`` would load OpenSSL on every ``tfdist run`` (~2 ms)."""
    crc = zlib.crc32(source + b"\0" + machine.encode())
    key = f"{crc:08x}{len(source):x}"
    return home / "lib" / f"loopback_bind-{key}.so"


def machine_key() -> str:
    """What a built library depends on besides its source: OS, architecture, C library."""
    try:
        libc = (os.confstr("CS_GNU_LIBC_VERSION") or "").replace(" ", "")  # "glibc2.36"
    except (ValueError, OSError):  # not glibc
        libc = ""
    if not libc:
        import platform  # reads the C library's name from the interpreter's binary

        libc = "".join(platform.libc_ver())
    return f"{sys.platform}-{os.uname().machine}-{libc}"


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


#: Prints the address a wildcard bind got and the parent-death signal it was given (0: none).
_PROBE = "import ctypes,socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEPORT,1);" \
         "s.bind(('0.0.0.0',int(sys.argv[1])));c=ctypes.c_int();" \
         "ctypes.CDLL(None).prctl(2,ctypes.byref(c),0,0,0);print(s.getsockname()[0],c.value)"


def self_test(library: Path) -> None:
    """Trust a freshly built library only once a preloaded Python (in its own session, as a
    task is) moved a wildcard bind and got its parent-death signal."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(("0.0.0.0", 0))
        port = str(held.getsockname()[1])
        env = {**os.environ, "LD_PRELOAD": str(library), LOOPBACK_PORTS: port, PARENT_VAR: str(os.getpid())}
        try:
            done = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE, port], env=env,
                                  capture_output=True, text=True, timeout=60, start_new_session=True)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise RuntimeError(f"the built library could not be tried: {err}") from None
    if done.stdout.split() != ["127.0.0.1", str(int(signal.SIGKILL))]:
        said = (done.stdout + done.stderr).strip().splitlines() or ["no output"]
        raise RuntimeError(
            f"the built library did not move a wildcard bind and set the death signal ({said[-1]})")


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
    """The interposer for a job (the one built at install, else one built here on first use);
    a guard with a warning when it cannot be had.

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
    if PACKAGED.is_file():
        return NetGuard(str(PACKAGED))
    try:
        source = SOURCE.read_bytes()
    except OSError as err:
        return NetGuard(None, warning_text(
            f"the interposer's source is missing from tfdist's installation ({err.strerror})",
            "reinstall tfdist"))
    home = home or tfdist_home(environ)
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

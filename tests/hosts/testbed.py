"""Many hosts on one machine: Linux network namespaces on a private bridge.

Test infrastructure, not part of tfdist. Each :class:`Host` is a network namespace with its
own address, its own hostname (a UTS namespace per command) and its own ``/etc/hosts`` (the
file ``/etc/netns/NS/hosts``, which ``ip netns exec`` mounts over ``/etc/hosts``) naming
every host of the bed, so names resolve between hosts as on a real LAN. The hosts hang off
one bridge by a veth pair each. What keeps the traffic inside:

- addresses come from 198.18.0.0/15 (RFC 2544, reserved for benchmarking networks);
- a host has one route, to its bridge's /24 -- no default route, so any other destination
  fails in the host's own stack ("Network is unreachable") before a packet is sent;
- the bridge and the root-side veths carry no address (IPv6 is switched off on them, so not
  even a link-local one): the root namespace takes no part in the bridge's traffic and has
  nothing to forward it with; no iptables rule and no ``ip_forward`` setting is involved;
- while a bed exists, the root namespace has an ``unreachable`` route for 198.18.0.0/15, so
  a process there that aims at a host's address by mistake gets "No route to host" instead
  of sending it to the default gateway.

Still one machine underneath: one kernel, one clock, one disk, one process table (a host's
processes are visible to ``ps`` in the root namespace).

The API (stable: other test suites run their daemons on it)::

    bed = HostBed.start(4)                 # or the session fixture ``host_bed`` (tests/conftest.py)
    bed.hosts                              # [Host h0, h1, h2, h3]: addresses 198.18.0.10-13
    h = bed.hosts[1]                       # Host(name="h1", address="198.18.0.11", netns=..., workdir=...)
    bed.host("h1")                         # the same, by name
    p = bed.run(h, ["python", "-c", "..."], env=..., cwd=..., stdout=...)   # a Popen "on" h1
    bed.pids(h)                            # every process in h1's network namespace
    bed.free_port(h)                       # a port free on h1
    bed.connect(h, ("198.18.0.12", 80))    # a socket connected from h1 (the caller closes it)
    bed.get(h, "http://198.18.0.10:8080/json/")   # an HTTP GET made from h1: (status, body)
    bed.crash(h)                           # SIGKILL every process on h1 (returns their pids)
    bed.partition(h) / bed.heal(h)         # h1's link down / up again
    bed.slow(h, delay_ms=20, loss=0.01) / bed.fast(h)   # a slow, lossy link / a plain one
    bed.fill_disk(h) / bed.free_disk(h)    # h1's workdir on a tiny tmpfs that is full / back
    bed.restore()                          # every link healed and plain, every disk back
    bed.close()                            # everything gone (idempotent)

``run`` passes ``env`` (default: this process's environment) and every Popen keyword
through; a command starts in a new session (``start_new_session=True``) unless told
otherwise. A host's ``workdir`` is a directory only that host's commands should use (its
"local disk"; ``fill_disk`` mounts over it).

Cleanup: every name the bed makes starts with ``tfdh<owner pid>`` (namespaces, links,
``/etc/netns`` entries, its temporary directory). :meth:`HostBed.close` kills every process
in each namespace (found with ``ip netns pids``) before deleting it. A guard process watches
the owner (``pidfd``) and does the same teardown if the owner dies without closing (a
SIGKILLed pytest), and :func:`sweep` -- run by :meth:`HostBed.start` -- removes what any dead
owner left (a guard that was killed too).

Latency and loss: this kernel has no ``sch_netem`` (``CONFIG_NET_SCH_NETEM`` is not set;
``tc qdisc add ... netem`` says "Specified qdisc kind is unknown"), so :meth:`HostBed.slow`
puts a user-space wire in the host's link instead: the host's veth is taken off the bridge
and a small relay (this file run as ``wire``) copies frames between it and a new veth on the
bridge, holding each frame ``delay_ms`` and dropping it with probability ``loss``, both
directions. Frames travel with their offload header (``PACKET_VNET_HDR``), so segmentation
and checksums stay the kernel's business; a segmentation-offloaded frame is lost whole.

Run as a script, this file is the guard (``guard PREFIX PID``), the wire (``wire ...``), or a
manual sweep (``sweep``). Standard library only, so it runs under any Python.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import heapq
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Every name the bed makes starts with this and the owner's pid.
PREFIX = "tfdh"
#: The bed's /24 (inside 198.18.0.0/15, RFC 2544); host i is .10+i.
SUBNET = "198.18.0"
#: What the root namespace refuses to route while a bed exists (all of RFC 2544's range).
ROUTE = "198.18.0.0/15"
NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")
DOMAIN = "tfdist.test"  # .test is reserved (RFC 6761): never a real name
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
_OWNED = re.compile(rf"^{PREFIX}(\d+)")


def unavailable() -> str | None:
    """Why a bed cannot be made here (None when it can): not root, no iproute2, or a
    kernel that refuses network namespaces, bridges or veth pairs."""
    if os.geteuid() != 0:
        return "the multi-host test bed needs root (network namespaces, a bridge, veth pairs)"
    if shutil.which("ip") is None:
        return "the multi-host test bed needs iproute2's ip command (apt-get install iproute2)"
    if shutil.which("unshare") is None:
        return "the multi-host test bed needs util-linux's unshare (a hostname per host)"
    probe = f"{PREFIX}{os.getpid()}p"
    try:
        for args in (["netns", "add", probe], ["link", "add", probe, "type", "bridge"],
                     ["link", "add", probe + "q", "type", "veth", "peer", "name", "eth0", "netns", probe]):
            _ip(*args)
    except BedError as err:
        return f"the kernel refuses what the multi-host test bed needs: {err}"
    finally:
        for args in (["link", "del", probe], ["link", "del", probe + "q"], ["netns", "del", probe]):
            _ip(*args, check=False)
    return None


class BedError(RuntimeError):
    """A command the bed needs failed (the message has its output)."""


@dataclass(frozen=True)
class Host:
    """One host of the bed."""

    name: str  #: its hostname (``h0``, ``h1``, ...); ``NAME.tfdist.test`` resolves too
    address: str  #: its one IPv4 address on the bridge
    netns: str  #: its network namespace (``ip netns exec NETNS ...``)
    link: str  #: the root-side end of its veth pair (faults act on it)
    workdir: Path  #: a directory for this host's own files (its "local disk")


class HostBed:
    """N hosts on one private bridge; see the module docstring for the API."""

    def __init__(self, prefix: str, root: Path, hosts: list[Host]) -> None:
        self.prefix = prefix
        self.root = root
        self.bridge = f"{prefix}br"
        self.hosts = hosts
        self._guard: subprocess.Popen[bytes] | None = None
        self._wires: dict[str, subprocess.Popen[bytes]] = {}
        self._disks: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    # -- making and unmaking ---------------------------------------------------------------

    @classmethod
    def start(cls, n: int = 4) -> HostBed:
        """Sweep what dead runs left, then make ``n`` hosts (at most 200) on a new bridge."""
        if not 1 <= n <= 200:
            raise ValueError(f"a bed has 1 to 200 hosts, not {n}")
        sweep()
        prefix = f"{PREFIX}{os.getpid()}"
        if any(p.startswith(prefix) for p in _owned_names()):
            raise BedError(f"this process already has a bed ({prefix}*): close it first")
        root = Path(tempfile.gettempdir()) / prefix
        root.mkdir(mode=0o755)
        (root / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
        hosts = [Host(f"h{i}", f"{SUBNET}.{10 + i}", f"{prefix}-h{i}", f"{prefix}v{i}", root / f"h{i}")
                 for i in range(n)]
        bed = cls(prefix, root, hosts)
        bed._guard = subprocess.Popen(  # tears the bed down if this process dies unclosed
            [sys.executable, str(Path(__file__).resolve()), "guard", prefix, str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        try:
            bed._make()
        except BaseException:
            bed.close()
            raise
        return bed

    def _make(self) -> None:
        # From the root namespace the bed's range is unreachable (not sent to the default
        # route, should anything there try): shared by every bed, removed with the last.
        _ip("route", "replace", "unreachable", ROUTE)
        _link_without_ipv6(self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        hosts_file = _hosts_file(self.hosts)
        for h in self.hosts:
            h.workdir.mkdir(mode=0o755)
            etc = ETC_NETNS / h.netns
            for _ in range(5):  # another bed's teardown may remove an empty /etc/netns meanwhile
                with contextlib.suppress(FileNotFoundError):
                    etc.mkdir(parents=True)
                    break
            (etc / "hosts").write_text(hosts_file)
            _ip("netns", "add", h.netns)
            _link_without_ipv6(h.link, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
            _ip("link", "set", h.link, "master", self.bridge, "up")
            _ip("-n", h.netns, "addr", "add", f"{h.address}/24", "dev", "eth0")
            _ip("-n", h.netns, "link", "set", "eth0", "up")
            _ip("-n", h.netns, "link", "set", "lo", "up")

    def close(self) -> None:
        """Kill every process on every host, then remove every namespace, link, mount,
        ``/etc/netns`` entry and file of the bed. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for wire in self._wires.values():
            _end(wire)
        teardown(self.prefix)
        if self._guard is not None:
            _end(self._guard)

    def __enter__(self) -> HostBed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- using hosts -----------------------------------------------------------------------

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(f"no host {name!r} in the bed (it has {', '.join(h.name for h in self.hosts)})")

    def command(self, host: Host, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` on ``host`` (its network namespace, its /etc/hosts and
        a UTS namespace with its hostname), for callers that spawn it themselves."""
        return ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', host.name, *argv]

    def run(self, host: Host, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` on ``host``; returns its Popen (the pid is the command's own: ``ip
        netns exec`` and ``sh`` exec into it). ``env`` defaults to this process's."""
        popen.setdefault("start_new_session", True)
        return subprocess.Popen(self.command(host, argv), env=dict(os.environ if env is None else env),
                                **popen)

    def pids(self, host: Host) -> list[int]:
        """Every live process in the host's network namespace."""
        return _netns_pids(host.netns)

    def call(self, host: Host, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a thread of this process that has entered the host's network
        namespace (its sockets belong to that host; names resolve from the root's
        /etc/hosts, so use addresses)."""
        box: dict[str, Any] = {}

        def inside() -> None:
            try:
                fd = os.open(NETNS_DIR / host.netns, os.O_RDONLY)
                try:
                    if _libc().setns(fd, CLONE_NEWNET) != 0:
                        code = ctypes.get_errno()
                        raise OSError(code, f"setns into {host.netns}: {os.strerror(code)}")
                finally:
                    os.close(fd)
                box["value"] = fn()
            except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = err

        worker = threading.Thread(target=inside, name=f"in-{host.name}", daemon=True)
        worker.start()
        worker.join()
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]

    def free_port(self, host: Host) -> int:
        def pick() -> int:
            with socket.socket() as s:
                s.bind((host.address, 0))
                return int(s.getsockname()[1])

        return self.call(host, pick)

    def connect(self, host: Host, address: tuple[str, int], timeout: float = 5.0) -> socket.socket:
        """A TCP connection made from ``host`` (raises OSError as a real client would)."""
        return self.call(host, lambda: socket.create_connection(address, timeout=timeout))

    def get(self, host: Host, url: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """An HTTP GET made from ``host``: (status, body). Raises OSError when unreachable."""
        def fetch() -> tuple[int, bytes]:
            with urllib.request.urlopen(url, timeout=timeout) as reply:
                return int(reply.status), reply.read()

        return self.call(host, fetch)

    def get_json(self, host: Host, url: str, timeout: float = 5.0) -> Any:
        return json.loads(self.get(host, url, timeout)[1])

    # -- faults ----------------------------------------------------------------------------

    def crash(self, host: Host) -> list[int]:
        """The host dies: SIGKILL every process in its namespace (again, until none is left:
        a process may fork while we kill). Returns the pids killed."""
        return _kill_netns(host.netns)

    def partition(self, host: Host) -> None:
        """Cut the host's cable: its link goes down at the bridge (the host keeps its address
        and routes; its packets go nowhere, as with a dead switch port)."""
        _ip("link", "set", self._outer(host), "down")

    def heal(self, host: Host) -> None:
        _ip("link", "set", self._outer(host), "up")

    def slow(self, host: Host, delay_ms: float = 20.0, loss: float = 0.0) -> None:
        """Every frame to or from the host waits ``delay_ms`` and is lost with probability
        ``loss`` (0..1), until :meth:`fast`. See the module docstring for why a wire, not netem."""
        if not (0 <= delay_ms <= 10_000 and 0 <= loss < 1):
            raise ValueError(f"delay_ms 0..10000 and loss 0..1, not {delay_ms}, {loss}")
        self.fast(host)
        index = self.hosts.index(host)
        inner, outer = f"{self.prefix}w{index}", f"{self.prefix}x{index}"
        _link_without_ipv6(inner, "type", "veth", "peer", "name", outer)
        _ipv6_off(outer)
        _ip("link", "set", host.link, "nomaster")
        _ip("link", "set", outer, "master", self.bridge, "up")
        _ip("link", "set", inner, "up")
        wire = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "wire", f"--bed={self.prefix}", host.link, inner,
             str(delay_ms), str(loss)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, preexec_fn=_die_with_parent)
        assert wire.stdout is not None
        if wire.stdout.readline().strip() != b"ready":
            _end(wire)
            self._unwire(host)
            raise BedError(f"the wire for {host.name} did not start")
        self._wires[host.name] = wire

    def fast(self, host: Host) -> None:
        """Back to a plain link (no-op when it is one)."""
        wire = self._wires.pop(host.name, None)
        if wire is not None:
            _end(wire)
            self._unwire(host)

    def _unwire(self, host: Host) -> None:
        index = self.hosts.index(host)
        _ip("link", "del", f"{self.prefix}w{index}", check=False)
        _ip("link", "set", host.link, "master", self.bridge, "up")

    def _outer(self, host: Host) -> str:
        """The link at the bridge's side: the host's veth, or its wire's when slowed."""
        return f"{self.prefix}x{self.hosts.index(host)}" if host.name in self._wires else host.link

    def fill_disk(self, host: Host, size: str = "4m") -> Path:
        """Mount a ``size`` tmpfs over the host's workdir (what was there is hidden until
        :meth:`free_disk`) and fill it, so every write there fails with ENOSPC."""
        if host.name in self._disks:
            return host.workdir
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", f"{self.prefix}-disk",
                        str(host.workdir)], check=True, capture_output=True)
        self._disks.add(host.name)
        with open(host.workdir / ".filler", "wb") as filler:
            chunk = b"\0" * (1 << 16)
            try:
                while True:
                    filler.write(chunk)
                    filler.flush()
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
        with contextlib.suppress(OSError), open(host.workdir / ".filler", "ab") as filler:
            while filler.write(b"\0"):  # the last bytes a partial chunk left
                filler.flush()
        return host.workdir

    def free_disk(self, host: Host) -> None:
        if host.name in self._disks:
            subprocess.run(["umount", "-l", str(host.workdir)], check=False, capture_output=True)
            self._disks.discard(host.name)

    def restore(self) -> None:
        """Undo every fault but crashes: links up, wires out, disks back (a test that made
        faults calls it when done, so the next test of the session gets a healthy bed)."""
        for h in self.hosts:
            self.fast(h)
            self.heal(h)
            self.free_disk(h)


# -- teardown, sweep, guard (also run from the guard process: stdlib only) -------------------


def teardown(prefix: str) -> None:
    """Remove everything named ``prefix*``: processes first (in each namespace, and the
    bed's own helpers in the root namespace), then mounts, namespaces, links and files."""
    names = [n for n in _owned_names() if n.startswith(prefix)]
    for name in names:
        _kill_netns(name)
    _kill_marked(f"--bed={prefix}")
    root = Path(tempfile.gettempdir()) / prefix
    for mount in _mounts_under(root):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    for name in names:
        _ip("netns", "del", name, check=False)
        shutil.rmtree(ETC_NETNS / name, ignore_errors=True)
    for link in _owned_links():
        if link.startswith(prefix):
            _ip("link", "del", link, check=False)
    shutil.rmtree(root, ignore_errors=True)
    if not list(Path(tempfile.gettempdir()).glob(f"{PREFIX}*")):  # the last bed: no other made one
        _ip("route", "del", "unreachable", ROUTE, check=False)
        with contextlib.suppress(OSError):
            ETC_NETNS.rmdir()  # only if empty: nothing else is using it


def sweep() -> list[str]:
    """Tear down every bed whose owner is dead (pid gone, or reused by a later process);
    returns their prefixes."""
    owners: dict[str, int] = {}
    for name in [*_owned_names(), *_owned_links(), *(p.name for p in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"))]:
        m = _OWNED.match(name)
        if m:
            owners[f"{PREFIX}{m.group(1)}"] = int(m.group(1))
    dead = [prefix for prefix, pid in owners.items() if not _owner_alive(prefix, pid)]
    for prefix in dead:
        teardown(prefix)
    return dead


def _owner_alive(prefix: str, pid: int) -> bool:
    if pid == os.getpid():
        return True
    started = _start_time(pid)
    if started is None:
        return False
    try:
        recorded = (Path(tempfile.gettempdir()) / prefix / "owner").read_text().split()
    except OSError:
        return True  # no record to compare with: leave it to its (live) owner
    return len(recorded) == 2 and recorded[1] == started


def guard(prefix: str, owner: int) -> None:
    """Wait for ``owner`` to exit, then tear its bed down (a no-op after a clean close)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fd = os.pidfd_open(owner)
    except OSError:
        teardown(prefix)
        return
    select.select([fd], [], [])
    teardown(prefix)


def _owned_names() -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(PREFIX))
    return []


def _owned_links() -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(PREFIX))
    return []


def _netns_pids(netns: str) -> list[int]:
    got = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False)
    return [int(w) for w in got.stdout.split() if w.isdigit()]


def _kill_netns(netns: str, wait: float = 10.0) -> list[int]:
    killed: list[int] = []
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        pids = _netns_pids(netns)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            if pid not in killed:
                killed.append(pid)
        time.sleep(0.05)
    return killed


def _kill_marked(marker: str) -> None:
    """SIGKILL processes of the root namespace whose command line has ``marker`` (wires)."""
    want = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if want in args:
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)


def _mounts_under(root: Path) -> list[str]:
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    return sorted({p for p in points if p == str(root) or p.startswith(f"{root}/")}, reverse=True)


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _ip(*args: str, check: bool = True) -> str:
    got = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and got.returncode != 0:
        raise BedError(f"ip {' '.join(args)}: {got.stderr.strip() or got.returncode}")
    return got.stdout


def _ipv6_off(link: str) -> None:
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6").write_text("1\n")


def _link_without_ipv6(name: str, *args: str) -> None:
    """``ip link add name ...`` with IPv6 off on the root-side device before it comes up
    (so it never gets even a link-local address)."""
    _ip("link", "add", name, *args)
    _ipv6_off(name)


def _hosts_file(hosts: list[Host]) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{h.address}\t{h.name}.{DOMAIN} {h.name}" for h in hosts]
    return "\n".join(lines) + "\n"


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _end(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


# -- the wire: a slow, lossy link in user space -------------------------------------------------

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_OUTGOING = 4


def wire(a: str, b: str, delay_ms: float, loss: float) -> None:
    """Copy frames between links ``a`` and ``b``, each held ``delay_ms`` and dropped with
    probability ``loss``. Runs until killed; prints ``ready`` once both ends are open."""
    socks = {}
    for name in (a, b):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, struct.pack("i", 1))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((name, 0))
        socks[name] = s
    other = {socks[a].fileno(): socks[b], socks[b].fileno(): socks[a]}
    by_fd = {s.fileno(): s for s in socks.values()}
    delay = delay_ms / 1000.0
    queue: list[tuple[float, int, socket.socket, bytes]] = []
    seq = 0
    rng = random.Random()
    print("ready", flush=True)
    while True:
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else None
        ready, _, _ = select.select(list(by_fd), [], [], timeout)
        for fd in ready:
            frame, addr = by_fd[fd].recvfrom(1 << 17)
            if addr[2] == PACKET_OUTGOING or (loss and rng.random() < loss):
                continue  # our own sends show up as outgoing; a lost frame is just not sent
            seq += 1
            heapq.heappush(queue, (time.monotonic() + delay, seq, other[fd], frame))
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, frame = heapq.heappop(queue)
            with contextlib.suppress(OSError):
                out.send(frame)


def main(argv: list[str]) -> None:
    if argv[:1] == ["guard"]:
        guard(argv[1], int(argv[2]))
    elif argv[:1] == ["wire"]:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        wire(argv[2], argv[3], float(argv[4]), float(argv[5]))
    elif argv[:1] == ["sweep"]:
        print("\n".join(sweep()))
    else:
        sys.exit("usage: testbed.py guard PREFIX PID | wire --bed=PREFIX A B DELAY_MS LOSS | sweep")


if __name__ == "__main__":
    main(sys.argv[1:])

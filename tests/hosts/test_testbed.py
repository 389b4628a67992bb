"""The multi-host test bed itself: hosts that are separate network stacks, nothing that
leaves the bridge, each fault on demand, and no trace after teardown (also when the owner
is SIGKILLed). Cheap: no TensorFlow, a few short Python processes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import alive
from tests.hosts import testbed

pytestmark = pytest.mark.hosts

ECHO = """
import socket, sys
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("listening", flush=True)
while True:
    conn, peer = server.accept()
    conn.sendall(peer[0].encode())
    conn.close()
"""


@pytest.fixture
def echo(host_bed):
    """An echo of the caller's address on h2, port chosen there; yields the port."""
    h2 = host_bed.host("h2")
    port = host_bed.free_port(h2)
    proc = host_bed.run(h2, [sys.executable, "-c", ECHO, str(port)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"listening"
    try:
        yield port
    finally:
        host_bed.restore()
        proc.kill()
        proc.wait()


def ask(bed, host, port: int, timeout: float = 5.0) -> str:
    with bed.connect(host, (bed.host("h2").address, port), timeout) as conn:
        return conn.recv(100).decode()


def leftovers(prefix: str) -> list[str]:
    """Whatever of a bed still exists: namespaces, links, /etc/netns entries, its directory."""
    found = [f"netns {n}" for n in testbed._owned_names() if n.startswith(prefix)]
    found += [f"link {n}" for n in testbed._owned_links() if n.startswith(prefix)]
    found += [f"etc {p}" for p in Path("/etc/netns").glob(f"{prefix}*")]
    found += [f"dir {p}" for p in Path(testbed.tempfile.gettempdir()).glob(prefix)]
    return found


def test_hosts_are_separate_stacks_that_resolve_each_other(host_bed):
    script = ("import json, socket; print(json.dumps([socket.gethostname(), socket.gethostbyname('h3'), "
              "socket.gethostbyname('h0.tfdist.test'), open('/proc/net/route').read()]))")
    out = host_bed.run(host_bed.host("h1"), [sys.executable, "-c", script], stdout=subprocess.PIPE).communicate()[0]
    name, h3, h0, routes = json.loads(out)
    assert (name, h3, h0) == ("h1", host_bed.host("h3").address, host_bed.host("h0").address)
    assert len({h.address for h in host_bed.hosts}) == len(host_bed.hosts) >= 4
    assert all(h.address.startswith("198.18.") for h in host_bed.hosts)  # RFC 2544's range
    # one route, the bridge's /24; no default route (destination 00000000)
    assert [ln.split()[1] for ln in routes.splitlines()[1:]] == ["000012C6"]


def test_the_echo_sees_the_callers_own_address(host_bed, echo):
    assert ask(host_bed, host_bed.host("h1"), echo) == host_bed.host("h1").address
    assert ask(host_bed, host_bed.host("h3"), echo) == host_bed.host("h3").address


def test_nothing_leaves_the_bridge(host_bed):
    """No route from a host to anything but the bridge's /24, no address in the root
    namespace on the bridge, and the root namespace refuses the bed's range. Route lookups
    only: nothing is sent anywhere to find out."""
    root_routes = subprocess.run(["ip", "-j", "route", "show"], capture_output=True, text=True).stdout
    outside = {r["gateway"] for r in json.loads(root_routes) if "gateway" in r}
    addrs = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True).stdout)
    outside |= {a["local"] for link in addrs for a in link.get("addr_info", []) if a["family"] == "inet"}
    outside |= {"192.0.2.1", "203.0.113.7"}  # documentation addresses: whatever a default route would reach
    for target in sorted(outside - {"127.0.0.1"}):
        got = subprocess.run(["ip", "-n", host_bed.host("h1").netns, "route", "get", target],
                             capture_output=True, text=True)
        assert got.returncode != 0 and "unreachable" in got.stderr, (target, got.stdout)
    bridge = json.loads(subprocess.run(["ip", "-j", "addr", "show", "dev", host_bed.bridge],
                                       capture_output=True, text=True).stdout)
    assert bridge[0]["addr_info"] == []  # not even IPv6 link-local
    for h in host_bed.hosts:
        link = json.loads(subprocess.run(["ip", "-j", "addr", "show", "dev", h.link], capture_output=True,
                                         text=True).stdout)
        assert link[0]["addr_info"] == []
    with pytest.raises(OSError) as refused:
        socket.create_connection((host_bed.host("h2").address, 9), timeout=2)
    assert refused.value.errno == 113  # EHOSTUNREACH: the unreachable route, nothing sent
    forwarding = json.loads(host_bed.run(host_bed.host("h1"), [
        sys.executable, "-c", "import json; print(json.dumps(open('/proc/sys/net/ipv4/ip_forward').read()))"],
        stdout=subprocess.PIPE).communicate()[0])
    assert forwarding.strip() == "0"


def test_partition_cuts_the_host_off_until_healed(host_bed, echo):
    h1 = host_bed.host("h1")
    host_bed.partition(h1)
    with pytest.raises(OSError):
        ask(host_bed, h1, echo, timeout=1.5)
    assert ask(host_bed, host_bed.host("h3"), echo) == host_bed.host("h3").address  # the rest is fine
    host_bed.heal(h1)
    assert ask(host_bed, h1, echo) == h1.address


def test_a_slow_link_delays_every_frame_and_can_drop_them(host_bed, echo):
    h1 = host_bed.host("h1")
    start = time.monotonic()
    ask(host_bed, h1, echo)
    plain = time.monotonic() - start
    host_bed.slow(h1, delay_ms=40)
    start = time.monotonic()
    assert ask(host_bed, h1, echo) == h1.address
    slowed = time.monotonic() - start
    # SYN, SYN-ACK, and the reply: at least three crossings of 40 ms each
    assert slowed >= 0.12 > plain, (plain, slowed)
    host_bed.slow(h1, delay_ms=0, loss=0.95)
    answered = 0
    for _ in range(3):
        try:
            ask(host_bed, h1, echo, timeout=0.5)
            answered += 1
        except OSError:
            pass
    assert answered < 3
    host_bed.fast(h1)
    assert ask(host_bed, h1, echo) == h1.address
    assert [n for n in testbed._owned_links() if n.startswith(f"{host_bed.prefix}w")] == []


def test_a_full_disk_on_one_host_only(host_bed):
    h3, h0 = host_bed.host("h3"), host_bed.host("h0")
    (h3.workdir / "before").write_text("kept")
    try:
        host_bed.fill_disk(h3)
        with pytest.raises(OSError) as full, open(h3.workdir / "new", "wb") as f:
            f.write(b"x" * 4096)
            f.flush()
        assert full.value.errno == 28  # ENOSPC
        (h0.workdir / "fine").write_text("room here")
    finally:
        host_bed.restore()
    assert (h3.workdir / "before").read_text() == "kept"


def test_crash_kills_every_process_on_the_host(host_bed):
    """Including one that left its session and process group (a daemon)."""
    h3 = host_bed.host("h3")
    script = ("import os, subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
              "print(child.pid, flush=True); time.sleep(300)")
    proc = host_bed.run(h3, [sys.executable, "-c", script], stdout=subprocess.PIPE)
    daemon = int(proc.stdout.readline())
    assert {proc.pid, daemon} <= set(host_bed.pids(h3))
    killed = host_bed.crash(h3)
    assert {proc.pid, daemon} <= set(killed)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(daemon) and host_bed.pids(h3) == []


OWNER = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import testbed
bed = testbed.HostBed.start(2)
sleeper = bed.run(bed.hosts[1], [sys.executable, "-c", "import time; time.sleep(300)"])
bed.slow(bed.hosts[0], 5)
bed.fill_disk(bed.hosts[0])
print(bed.prefix, bed._guard.pid, sleeper.pid, flush=True)
time.sleep(300)
"""


def _killed_owner() -> tuple[str, int, int]:
    """A process that made a bed (a wire, a full disk, a sleeper on a host), SIGKILLed."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(Path(testbed.__file__).parent)],
                             stdout=subprocess.PIPE, text=True)
    prefix, guard, sleeper = owner.stdout.readline().split()
    assert leftovers(prefix)
    owner.kill()
    owner.wait()
    return prefix, int(guard), int(sleeper)


def test_a_killed_owner_leaves_nothing(host_bed):
    prefix, guard, sleeper = _killed_owner()
    deadline = time.monotonic() + 20
    while (leftovers(prefix) or alive(sleeper)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(prefix) == [] and not alive(sleeper)
    assert not testbed._mounts_under(Path(testbed.tempfile.gettempdir()) / prefix)


def test_the_next_start_sweeps_what_a_dead_run_left(host_bed):
    """Owner and guard both SIGKILLed (nothing could clean up): the sweep every start runs
    removes it, and leaves live beds (the session's) alone."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER.replace("testbed.HostBed.start(2)",
                              "testbed.HostBed.start(2)\nimport os, signal\nos.kill(bed._guard.pid, signal.SIGKILL)"),
                              str(Path(testbed.__file__).parent)], stdout=subprocess.PIPE, text=True)
    prefix, _guard, sleeper = owner.stdout.readline().split()
    owner.kill()
    owner.wait()
    time.sleep(0.5)
    assert leftovers(prefix) and alive(int(sleeper))
    assert prefix in testbed.sweep()
    assert leftovers(prefix) == [] and not alive(int(sleeper))
    assert leftovers(host_bed.prefix)  # a live owner's bed is kept

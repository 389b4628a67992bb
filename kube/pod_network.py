"""The real node's pod network: a /24 reserved for documentation (RFC 5737) that nothing on
this machine uses or talks to. kube/node.sh runs it at ``up`` and puts its bridge there.

Why it is chosen, not fixed: the bridge's address gives the machine's own stack a route for
the whole /24, so while the node is up every address in it is looked for on the bridge. One
machine of this kind resolved the package registries (Maven Central, PyPI, the Go proxy) to a
proxy inside TEST-NET-3, the range the node once always took: with the node up the set-up's
Maven fetch failed with "No route to host". A /24 is taken when an address or route of the
machine lies in it (other than the node's own bridge), or when an address the machine needs
does: its nameservers, its proxies, what the registries resolve to, and the peers of its open
TCP connections.

    python3 kube/pod_network.py      # prints the /24 (198.51.100.0/24), or why none is free; exit 1

Standard library only: it runs before the project's environment may exist.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Iterable
from ipaddress import IPv4Address, IPv4Network

#: RFC 5737's three documentation ranges, in the order tried.
CANDIDATES = [IPv4Network("198.51.100.0/24"), IPv4Network("203.0.113.0/24"), IPv4Network("192.0.2.0/24")]
#: The hosts the set-up fetches from (.ci/run, make setup, kube/kube.sh, yarn/yarn.sh).
REGISTRIES = ["pypi.org", "files.pythonhosted.org", "repo.maven.apache.org", "repo1.maven.org",
              "proxy.golang.org", "sum.golang.org", "deb.debian.org"]
#: The node's own bridge (kube/node.sh): its route is not someone else's.
BRIDGE = "tfdist-br0"


def choose(candidates: Iterable[IPv4Network], networks: Iterable[IPv4Network],
           addresses: Iterable[IPv4Address]) -> IPv4Network | None:
    """The first candidate that overlaps none of ``networks`` (the machine's routes and
    interface networks, the default route left out) and holds none of ``addresses``."""
    networks, addresses = list(networks), list(addresses)
    for candidate in candidates:
        if not any(candidate.overlaps(n) for n in networks) and not any(a in candidate for a in addresses):
            return candidate
    return None


def routes(text: str) -> list[IPv4Network]:
    """The destinations of ``ip -4 route show`` / ``ip -4 -o addr show``'s networks, but the
    default route and the node's own bridge."""
    found = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] == "default" or BRIDGE in words:
            continue
        target = next((w for w in words if "/" in w or _is_address(w)), None)
        if target is not None:
            found.append(IPv4Network(target, strict=False))
    return found


def nameservers(text: str) -> list[IPv4Address]:
    """The IPv4 nameservers of a resolv.conf."""
    return [IPv4Address(w[1]) for w in (ln.split() for ln in text.splitlines())
            if len(w) >= 2 and w[0] == "nameserver" and _is_address(w[1])]


def tcp_peers(text: str) -> list[IPv4Address]:
    """The remote addresses in /proc/net/tcp (little-endian hex)."""
    peers = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and ":" in fields[2]:
            peers.append(IPv4Address(int.from_bytes(bytes.fromhex(fields[2].split(":")[0]), "little")))
    return [p for p in peers if not p.is_unspecified]


def _is_address(word: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(word), IPv4Address)
    except ValueError:
        return False


def _resolved(names: Iterable[str]) -> list[IPv4Address]:
    found = []
    for name in names:
        try:
            infos = socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            continue
        found += [IPv4Address(info[4][0]) for info in infos]
    return found


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _ip(*args: str) -> str:
    return subprocess.run(["ip", "-4", *args], capture_output=True, text=True, check=False).stdout


def main() -> int:
    proxies = [v for k, v in os.environ.items() if k.lower() in ("http_proxy", "https_proxy", "all_proxy")]
    hosts = [h for v in proxies if (h := urllib.parse.urlsplit(v).hostname)]
    networks = routes(_ip("route", "show")) + routes(_ip("-o", "addr", "show"))
    addresses = (nameservers(_read("/etc/resolv.conf")) + tcp_peers(_read("/proc/net/tcp"))
                 + _resolved([*REGISTRIES, *hosts]))
    chosen = choose(CANDIDATES, networks, addresses)
    if chosen is None:
        print("no documentation range (RFC 5737) is free: each holds a route, an interface or an address "
              "this machine talks to", file=sys.stderr)
        return 1
    print(chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())

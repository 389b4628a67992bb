"""kube/pod_network.py's choice of the real node's pod network: a documentation /24 that holds
none of the machine's routes or of the addresses it talks to (a machine whose package proxy
sat in TEST-NET-3 lost Maven Central while the node's bridge held that /24)."""

from __future__ import annotations

import importlib.util
from ipaddress import IPv4Address, IPv4Network

from tests.backends.k8s.k8s_helpers import ROOT

_spec = importlib.util.spec_from_file_location("pod_network", ROOT / "kube" / "pod_network.py")
assert _spec is not None and _spec.loader is not None
pod_network = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pod_network)

ROUTES = """default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
unreachable 198.18.0.0/15
203.0.113.0/24 dev tfdist-br0 proto kernel scope link src 203.0.113.1
198.51.100.7 via 192.0.2.1 dev eth0
"""
ADDRS = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever
9: tfdist-br0    inet 203.0.113.1/24 scope global tfdist-br0\\       valid_lft forever
"""


def test_routes_leave_out_the_default_and_the_nodes_own_bridge() -> None:
    assert pod_network.routes(ROUTES) == [IPv4Network("192.0.2.0/24"), IPv4Network("198.18.0.0/15"),
                                          IPv4Network("198.51.100.7/32")]
    assert pod_network.routes(ADDRS) == [IPv4Network("127.0.0.0/8"), IPv4Network("192.0.2.0/24")]


def test_a_range_holding_a_route_or_an_address_the_machine_talks_to_is_passed_over() -> None:
    candidates = pod_network.CANDIDATES
    # the machine this was found on: eth0 in TEST-NET-1, the registries' proxy in TEST-NET-3
    assert pod_network.choose(candidates, pod_network.routes(ROUTES)[:1], [IPv4Address("203.0.113.80")]) \
        == IPv4Network("198.51.100.0/24")
    # a host route into TEST-NET-2, a nameserver in TEST-NET-3, eth0 in TEST-NET-1: none is free
    assert pod_network.choose(candidates, pod_network.routes(ROUTES), [IPv4Address("203.0.113.53")]) is None
    assert pod_network.choose(candidates, [], [IPv4Address("198.51.100.200")]) == IPv4Network("203.0.113.0/24")
    assert pod_network.choose(candidates, [], []) == IPv4Network("198.51.100.0/24")


def test_resolv_conf_and_proc_net_tcp_are_read() -> None:
    assert pod_network.nameservers("# a comment\nnameserver 10.255.255.53\nnameserver ::1\nsearch x\n") \
        == [IPv4Address("10.255.255.53")]
    tcp = ("  sl  local_address rem_address   st\n"
           "   0: 0100007F:0CEA 00000000:0000 0A\n"        # listening: no peer
           "   1: 020200C0:C350 507100CB:01BB 01\n")       # 192.0.2.2 -> 203.0.113.80:443
    assert pod_network.tcp_peers(tcp) == [IPv4Address("203.0.113.80")]

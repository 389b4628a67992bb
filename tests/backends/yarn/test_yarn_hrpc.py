"""The job application's pure parts, without a cluster: protobuf's wire format, Hadoop RPC's
framing and errors, SASL DIGEST-MD5 (RFC 2831's worked example), the RM's RPC addresses,
and the job application's decisions (submission, final status, diagnostics, URLs) and the
AM share it takes in the fit check."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from tfdist.backends.yarn import conf, hrpc, jobapp, plan
from tfdist.node import protowire
from tfdist.states import JobState


@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
    (-1, b"\xff" * 9 + b"\x01"),  # an int32/int64 -1: ten bytes of two's complement
])
def test_varints_as_protobuf_writes_them(value: int, encoded: bytes) -> None:
    assert protowire.varint(value) == encoded
    assert protowire.read_varint(encoded + b"rest", 0) == (value & (1 << 64) - 1, len(encoded))


def test_zigzag_is_sint_s_encoding() -> None:
    assert [protowire.zigzag(n) for n in (0, -1, 1, -2, 2, -3)] == [0, 1, 2, 3, 4, 5]


def test_a_message_reads_back_field_by_field() -> None:
    # protobuf's documented example: field 1 = 150 is 08 96 01; field 2 = "testing" is 12 07 ...
    assert protowire.field(1, 150) == bytes.fromhex("089601")
    assert protowire.field(2, "testing") == bytes.fromhex("120774657374696e67")
    nested = protowire.field(1, "alias") + protowire.field(3, b"secret")
    message = (protowire.field(1, 150) + protowire.field(2, nested) + protowire.field(2, b"again")
               + bytes([0x1D]) + struct.pack("<I", 7) + bytes([0x21]) + struct.pack("<Q", 9))  # fixed32/64
    fields = protowire.parse(message)
    assert protowire.number(fields, 1) == 150 and protowire.number(fields, 9) == 0
    assert protowire.blobs(fields, 2) == [nested, b"again"] and protowire.blob(fields, 2) == b"again"
    assert protowire.parse(protowire.blobs(fields, 2)[0]) == {1: [b"alias"], 3: [b"secret"]}
    assert (protowire.number(fields, 3), protowire.number(fields, 4)) == (7, 9)
    assert protowire.text(fields, 7) == ""
    assert protowire.delimited(b"abc") == b"\x03abc"


@pytest.mark.parametrize("bad", [b"\x08", b"\x08\xff", b"\x12\x05ab", b"\x0b", b"\x1d\x01", b"\xff" * 11])
def test_malformed_messages_are_refused(bad: bytes) -> None:
    with pytest.raises(ValueError):
        protowire.parse(bad)
    with pytest.raises(hrpc.RPCError, match="malformed"):
        hrpc.parse(bad)


# RFC 2831, section 4: the worked example (IMAP, user chris, password secret)
RFC_CHALLENGE = b'realm="elwood.innosoft.com",nonce="OA6MG9tEQGm2hh",qop="auth",algorithm=md5-sess,charset=utf-8'


def test_digest_md5_answers_rfc_2831_s_example() -> None:
    digest = hrpc.DigestMD5("chris", "secret", "imap/elwood.innosoft.com", cnonce="OA6MHXh6VqTrRk")
    reply = digest.respond(RFC_CHALLENGE).decode()
    said = dict(part.split("=", 1) for part in reply.split(","))
    assert said["response"] == "d388dad90d4bbd760a152321f2143af7"
    assert (said["username"], said["realm"], said["nonce"], said["cnonce"], said["nc"], said["qop"],
            said["digest-uri"]) == ('"chris"', '"elwood.innosoft.com"', '"OA6MG9tEQGm2hh"', '"OA6MHXh6VqTrRk"',
                                    "00000001", "auth", '"imap/elwood.innosoft.com"')
    assert digest.respond(b"rspauth=ea40f60335c427b5527b84dbabcdfffd") == b"" and digest.verified


def test_digest_md5_refuses_a_wrong_rspauth_and_other_qops() -> None:
    digest = hrpc.DigestMD5("chris", "secret", "imap/elwood.innosoft.com", cnonce="OA6MHXh6VqTrRk")
    digest.respond(RFC_CHALLENGE)
    with pytest.raises(hrpc.RPCError, match="rspauth"):
        digest.respond(b"rspauth=00000000000000000000000000000000")
    with pytest.raises(hrpc.RPCError, match="only 'auth'"):
        hrpc.DigestMD5("u", "p", "x/y").respond(b'nonce="n",qop="auth-conf"')


def test_hadoop_s_token_form_of_the_credentials() -> None:
    token = hrpc.Token(b"\x00id", b"\xffpw", "YARN_AM_RM_TOKEN")
    digest = hrpc.DigestMD5.for_token(token, "", "default")
    assert (digest.user, digest.password, digest.uri) == ("AGlk", "/3B3", "/default")
    assert hrpc.Token.from_proto(protowire.field(1, b"\x00id") + protowire.field(2, b"\xffpw")
                                 + protowire.field(3, "YARN_AM_RM_TOKEN")) == token


def _answer(header: bytes, message: bytes = b"") -> bytes:
    payload = protowire.delimited(header) + (protowire.delimited(message) if message else b"")
    return struct.pack(">I", len(payload)) + payload


def test_a_response_is_its_call_s_message_and_an_error_names_the_server_s_exception() -> None:
    conn = object.__new__(hrpc.Connection)  # no handshake: the framing only
    conn.sock, server = socket.socketpair()
    try:
        server.sendall(_answer(protowire.field(1, 1) + protowire.field(2, 0), b"\x08\x2a"))
        assert conn._recv(1) == b"\x08\x2a"
        error = (protowire.field(1, 2) + protowire.field(2, 1)
                 + protowire.field(4, "org.apache.hadoop.security.AccessControlException")
                 + protowire.field(5, "SIMPLE authentication is not enabled.  Available:[TOKEN]\n\tat ..."))
        server.sendall(_answer(error))
        with pytest.raises(hrpc.RPCError, match="AccessControlException: SIMPLE authentication") as got:
            conn._recv(2)
        assert got.value.exception_class == "org.apache.hadoop.security.AccessControlException"
        server.sendall(_answer(protowire.field(1, 7) + protowire.field(2, 0)))
        with pytest.raises(hrpc.RPCError, match="not to call 3"):
            conn._recv(3)
        server.sendall(struct.pack(">I", hrpc.MAX_PACKET + 1))
        with pytest.raises(hrpc.RPCError, match="at most"):
            conn._recv(4)
        server.close()
        with pytest.raises(hrpc.RPCError, match="closed"):
            conn._recv(5)
    finally:
        conn.sock.close()


def test_application_ids_travel_as_their_two_numbers() -> None:
    encoded = hrpc.application_id("application_1796198669079_0002")
    assert protowire.parse(encoded) == {1: [2], 2: [1796198669079]}


def test_the_rm_s_rpc_addresses_defaults_and_ha() -> None:
    assert conf.rm_rpc_addresses({}, "yarn.resourcemanager.address") == [("0.0.0.0", 8032)]
    site = {"yarn.resourcemanager.hostname": "rm.example"}
    assert conf.rm_rpc_addresses(site, "yarn.resourcemanager.scheduler.address") == [("rm.example", 8030)]
    ha = {"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
          "yarn.resourcemanager.hostname.rm1": "a.example",
          "yarn.resourcemanager.scheduler.address.rm2": "b.example:9030"}
    assert conf.rm_rpc_addresses(ha, "yarn.resourcemanager.scheduler.address") == \
        [("a.example", 8030), ("b.example", 9030)]


def test_the_site_file_is_read_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "yarn-site.xml").write_text(
        "<configuration><property><name>a</name><value>1</value></property></configuration>")
    assert conf.read_site(tmp_path) == {"a": "1"}
    assert conf.read_site(tmp_path / "none") == {} and conf.read_site(None) == {}
    (tmp_path / "yarn-site.xml").write_text("not xml")
    assert conf.read_site(tmp_path) == {}


def test_the_job_application_is_unmanaged_in_the_job_s_queue_with_the_run_s_tags() -> None:
    body = jobapp.submission("application_1_0001", "tfdist-j", "tfdist", ["tfdist", "tfdist-job-j", "tfdist-run-x"])
    assert (body["application-name"], body["queue"], body["unmanaged-AM"], body["max-app-attempts"]) == \
        ("tfdist-j", "tfdist", True, 1)
    assert body["application-tags"] == {"tag": ["tfdist", "tfdist-job-j", "tfdist-run-x"]}
    assert body["resource"] == {"memory": plan.JOB_AM_MEMORY_MB, "vCores": 1}


@pytest.mark.parametrize(("state", "status"), [
    (JobState.SUCCEEDED, "SUCCEEDED"), (JobState.FAILED, "FAILED"), (JobState.LOST, "FAILED"),
    (JobState.INTERRUPTED, "KILLED"), (JobState.STOPPED, "KILLED"),
])
def test_the_final_status_is_the_job_s_outcome(state: JobState, status: str) -> None:
    assert jobapp.final_status(state) == status
    assert status in hrpc.FINAL_STATUSES


def test_diagnostics_are_one_line() -> None:
    assert jobapp.diagnostics("j", JobState.SUCCEEDED, "") == "tfdist: job j succeeded"
    assert jobapp.diagnostics("j", JobState.FAILED, "worker-0: exit code 3\nmore") == \
        "tfdist: job j failed: worker-0: exit code 3"
    assert len(jobapp.diagnostics("j", JobState.FAILED, "x" * 5000)) == 500


def test_only_an_http_url_is_a_tracking_url(tmp_path: Path) -> None:
    assert jobapp.tracking_url("http://127.0.0.1:6006/\n") == "http://127.0.0.1:6006/"
    assert jobapp.tracking_url("https://[::1]:6006/x?y=1") == "https://[::1]:6006/x?y=1"
    for bad in ("", "http://", "ftp://h/", "http://h/ two words", "javascript:alert(1)", "http://h\nhttp://i"):
        assert jobapp.tracking_url(bad) == "", bad
    assert jobapp.url_in(tmp_path / "none") == ""
    (tmp_path / "url").write_text("http://127.0.0.1:6006/\n")
    assert jobapp.url_in(tmp_path / "url") == "http://127.0.0.1:6006/"
    assert jobapp.run_listing("http://rm:8088/", "tfdist-run-x") == \
        "http://rm:8088/ws/v1/cluster/apps?applicationTags=tfdist-run-x"


def test_the_fit_check_counts_the_job_s_application_in_the_am_share_only() -> None:
    scheduler = {"scheduler": {"schedulerInfo": {"type": "capacityScheduler", "queues": {"queue": [
        {"queueName": "q", "maxEffectiveCapacity": {"memory": 8192, "vCores": 8},
         "configuredMaxAMResourceLimit": 0.1}]}}}}
    limits = plan.queue_limits(scheduler, "q", {})
    assert limits is not None and limits.am_memory_mb == 819
    two_roles = plan.role_asks([("chief", 1, None, 0, "1Gi"), ("worker", 1, None, 0, "1Gi")])
    assert plan.fit_problem(two_roles, limits) is None  # 2 x 256 + 128 <= 819
    three_roles = plan.role_asks([("chief", 1, None, 0, "1Gi"), ("worker", 1, None, 0, "1Gi"),
                                  ("ps", 1, None, 0, "1Gi")])
    said = plan.fit_problem(three_roles, limits) or ""
    assert "4 ApplicationMasters need 896 MB" in said and "job's own application" in said, said
    # the queue's capacity does not count it (it holds no container): 7680 + 2 x 256 fits 8192
    full = plan.role_asks([("chief", 1, None, 0, "3840Mi"), ("worker", 1, None, 0, "3840Mi")])
    assert plan.fit_problem(full, plan.QueueLimits("q", None, None, 8192, 8)) is None

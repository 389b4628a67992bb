"""The reaper of a run's YARN applications (tfdist.backends.yarn.reaper): what it kills, when
it stops trying, and the process itself against a small stand-in for the RM's REST API
(the real cluster's test: test_yarn_backend.py, an application still ACCEPTED when tfdist
is SIGKILLed)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tfdist.backends.yarn import reaper, rest

TAG = "tfdist-run-job-0a1b2c3d4e5f"


def app(app_id: str, state: str = "ACCEPTED", tags: str = f"tfdist,tfdist-job-job,{TAG}") -> dict[str, Any]:
    return {"id": app_id, "state": state, "applicationTags": tags}


def test_doomed_are_the_live_applications_with_exactly_the_run_s_tag() -> None:
    apps = [
        app("application_1_0001"),
        app("application_1_0002", "RUNNING"),
        app("application_1_0003", "NEW_SAVING", TAG.upper()),  # YARN lowercases; compare so too
        app("application_1_0004", "FINISHED"), app("application_1_0005", "KILLED"),
        app("application_1_0006", tags="tfdist,tfdist-job-job,tfdist-run-job-0a1b2c3d4e5"),  # a prefix
        app("application_1_0007", tags="tfdist,tfdist-job-job,tfdist-run-job-0a1b2c3d4e5f0"),  # longer
        app("application_1_0008", tags="tfdist,tfdist-job-job"),  # the same job, not this run
        app("application_1_0009", tags=""), {"id": "application_1_0010", "state": "ACCEPTED"},
        app("not-an-id"), app("application_1_0011; rm -rf /"), "garbage", None,
        app("application_1_0001"),  # listed twice: killed once
    ]
    assert reaper.doomed(apps, TAG) == ["application_1_0001", "application_1_0002", "application_1_0003"]
    assert reaper.doomed(apps, "") == []
    assert reaper.doomed([], TAG) == []


def test_its_live_states_are_the_rest_client_s() -> None:
    assert reaper.LIVE_STATES == rest.LIVE_STATES


class FakeRm:
    """The reaper's two calls, answering from a list that kills empty (or never answering)."""

    def __init__(self, apps: list[dict[str, Any]], answers: bool = True, kills: bool = True) -> None:
        self.live, self.answers, self.kills = apps, answers, kills
        self.listed = 0
        self.killed: list[str] = []

    def apps(self, tag: str) -> list[Any]:
        self.listed += 1
        if not self.answers:
            raise rest.RMError("connection refused")
        return list(self.live)

    def kill(self, app_id: str) -> None:
        self.killed.append(app_id)
        if self.kills:
            self.live = [a for a in self.live if a["id"] != app_id]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def reaped(rm: FakeRm) -> tuple[list[str], float]:
    clock, said = Clock(), []
    reaper.reap(rm, TAG, said.append, clock, clock.sleep)
    return said, clock.now


def test_reap_kills_the_run_s_applications_and_ends_once_none_is_live_after_the_settling_time() -> None:
    other = app("application_1_0009", tags="tfdist,tfdist-job-other,tfdist-run-other-0a1b2c3d4e5f")
    rm = FakeRm([app("application_1_0001"), app("application_1_0002", "RUNNING"), other])
    said, took = reaped(rm)
    assert rm.killed == ["application_1_0001", "application_1_0002"]  # never the other run's
    assert reaper.SETTLE <= took < reaper.SETTLE + 2 * reaper.ROUND
    assert said[-1] == "none of this run's applications is live (2 killed)"


def test_an_empty_list_is_believed_only_after_the_settling_time() -> None:
    """A submission in flight when tfdist died shows up late: an empty first answer is asked again."""
    rm = FakeRm([])
    said, took = reaped(rm)
    assert rm.listed >= 2 and took >= reaper.SETTLE and rm.killed == []


@pytest.mark.parametrize(("answers", "kills", "says"), [
    (False, True, "the ResourceManager does not answer (connection refused)"),
    (True, False, "applications still live: application_1_0001"),
])
def test_reap_gives_up_after_a_bounded_time(answers: bool, kills: bool, says: str) -> None:
    rm = FakeRm([app("application_1_0001")], answers=answers, kills=kills)
    said, took = reaped(rm)
    assert reaper.GIVE_UP <= took < reaper.GIVE_UP + 2 * reaper.ROUND
    assert rm.listed <= reaper.GIVE_UP / reaper.ROUND + 2
    assert said[-1].startswith(f"gave up after {reaper.GIVE_UP:g}s") and says in said[-1], said


class RmStandIn(BaseHTTPRequestHandler):
    """Answers the reaper's GET of the apps and PUT of a state, recording each request."""

    calls: list[tuple[str, str, Any]] = []
    apps: list[dict[str, Any]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.calls.append(("GET", self.path, None))
        self._reply({"apps": {"app": self.apps}})

    def do_PUT(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(("PUT", self.path, body))
        type(self).apps = [a for a in self.apps if a["id"] not in self.path]
        self._reply({"state": "KILLING"})

    def _reply(self, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    RmStandIn.calls, RmStandIn.apps = [], [app("application_1_0001")]
    server = ThreadingHTTPServer(("127.0.0.1", 0), RmStandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
            os.kill(pid, 0)
        except (ChildProcessError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def test_the_process_holds_only_its_pipe_and_reaps_at_end_of_file(stand_in: str, tmp_path: Path) -> None:
    """End-of-file on its stdin (the owner died without saying exit): it kills the tagged
    application through the RM (as the given user, with diagnostics), records it, and exits.
    While it waits it holds no file of its owner but the pipe, in a session of its own."""
    log = tmp_path / "yarn-reaper.log"
    held = reaper.Reaper(TAG, [stand_in], "alice", log)
    proc = held._proc
    assert proc is not None and proc.stdin is not None
    fds = {int(fd): os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")}
    assert fds[1] == fds[2] == "/dev/null" and fds[0].startswith("pipe:"), fds
    assert set(fds) == {0, 1, 2}, fds  # no lock, socket or log of the owner's
    assert os.getsid(proc.pid) == proc.pid != os.getsid(0)
    assert RmStandIn.calls == []  # nothing until its owner ends
    proc.stdin.close()  # as the kernel does when the owner is SIGKILLed
    assert proc.wait(timeout=30) == 0
    kills = [c for c in RmStandIn.calls if c[0] == "PUT"]
    assert [c[1].split("?")[0] for c in kills] == ["/ws/v1/cluster/apps/application_1_0001/state"]
    assert kills[0][2] == {"state": "KILLED", "diagnostics": reaper.DIAGNOSTICS}
    assert all("user.name=alice" in c[1] and (c[0] == "PUT" or f"applicationTags={TAG}" in c[1])
               for c in RmStandIn.calls), RmStandIn.calls
    lines = log.read_text().splitlines()
    assert "killed application_1_0001 through the ResourceManager" in lines[0], lines
    assert lines[-1].endswith("none of this run's applications is live (1 killed)"), lines


def test_exit_ends_the_process_quietly(stand_in: str, tmp_path: Path) -> None:
    held = reaper.Reaper(TAG, [stand_in], None, tmp_path / "yarn-reaper.log")
    pid = held.pid
    held.close()
    assert pid is not None and wait_gone(pid, 5)
    assert RmStandIn.calls == [] and not (tmp_path / "yarn-reaper.log").exists()


def test_a_cleanup_the_rm_did_not_answer_is_left_to_the_reaper(stand_in: str, tmp_path: Path) -> None:
    """close(reap=True), as tfdist says when its own kills failed: no ``exit``, so the
    reaper kills the run's applications itself once the RM answers, and ends."""
    log = tmp_path / "yarn-reaper.log"
    held = reaper.Reaper(TAG, [stand_in], "alice", log)
    proc = held._proc
    assert proc is not None
    held.close(reap=True)
    assert proc.wait(timeout=30) == 0
    kills = [c for c in RmStandIn.calls if c[0] == "PUT"]
    assert [c[1].split("?")[0] for c in kills] == ["/ws/v1/cluster/apps/application_1_0001/state"]
    assert log.read_text().splitlines()[-1].endswith("(1 killed)")

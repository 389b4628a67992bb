"""The real YARN cluster of `make yarn-up` (yarn/yarn.sh), as pytest fixtures.

Tests that use it skip, with one line saying why and how to get it, when it does not run
(no Java or Maven, a failed fetch or start: .yarn/unavailable says which), or was simply not
started. The cluster (one ResourceManager, two NodeManagers on 127.0.0.1) is shared by every
test of a session.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
STATE = ROOT / ".yarn"
CONF = STATE / "conf"
UNAVAILABLE = STATE / "unavailable"


def why_unavailable() -> str | None:
    """None when the cluster answers; else one line: why not, and how to get it."""
    if not (STATE / "rm-url").exists() or not (CONF / "yarn-site.xml").exists():
        if UNAVAILABLE.exists():
            return f"no YARN cluster: {UNAVAILABLE.read_text().strip()}"
        return "no YARN cluster running; start one with: make yarn-up"
    try:
        Cluster().get("/ws/v1/cluster/info")
    except OSError as err:
        return f"the YARN cluster of .yarn/ does not answer ({err}); restart it: make yarn-down yarn-up"
    return None


class Cluster:
    """The test cluster's RM REST API as plain JSON, and its client configuration."""

    def __init__(self) -> None:
        self.url = (STATE / "rm-url").read_text().strip()
        self.conf_dir = CONF
        self.env = {"HADOOP_CONF_DIR": str(CONF)}

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as reply:
            return json.loads(reply.read())

    def apps(self, tag: str) -> list[dict[str, Any]]:
        got = self.get(f"/ws/v1/cluster/apps?applicationTags={tag}").get("apps") or {}
        return list(got.get("app") or [])

    def live_apps(self, tag: str, wait: float = 30.0) -> list[dict[str, Any]]:
        """Applications with ``tag`` still live after up to ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while True:
            live = [a for a in self.apps(tag) if a["state"] in ("NEW", "NEW_SAVING", "SUBMITTED",
                                                                   "ACCEPTED", "RUNNING")]
            if not live or time.monotonic() > deadline:
                return live
            time.sleep(0.5)


def container_pids(container_id: str) -> list[int]:
    """Processes running in a YARN container (their environment names it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            env = (entry / "environ").read_bytes().split(b"\0")
            if f"CONTAINER_ID={container_id}".encode() in env:
                found.append(int(entry.name))
    return found


@pytest.fixture(scope="session")
def yarn() -> Cluster:
    why = why_unavailable()
    if why:
        pytest.skip(why)
    return Cluster()


@pytest.fixture
def yarn_env(yarn: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """The cluster, with HADOOP_CONF_DIR set for the tfdist commands a test runs."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(yarn.conf_dir))
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    os.environ.pop("HADOOP_USER_NAME", None)
    return yarn

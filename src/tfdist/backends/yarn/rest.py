"""The ResourceManager's and NodeManagers' REST APIs: the only place tfdist talks to YARN.

Standard library only (urllib). Every call has a timeout and returns JSON or raises
:class:`RMError` with one line saying what was asked and what came back. With HA the
configured RMs are tried in order until one answers, and the one that answered is asked
first next time; a standby RM (it answers with a redirect to the active one, or 503 while
it cannot serve) counts as no answer. No authentication beyond Hadoop's ``simple`` mode
(``user.name``); Kerberos (SPNEGO) is not covered.

One client for all of tfdist, the run's reaper included (:mod:`tfdist.backends.yarn.reaper`,
a separate ``python -I -S`` process that loads tfdist's own files but no installed package):
so this module imports the standard library only at its top, and
:meth:`ResourceManager.from_environ`, which reads the cluster's configuration, imports what it
needs when called (the reaper is handed the RM's addresses instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: An answer larger than this is cut off (a cluster's app list can be long; a log is capped).
MAX_BODY = 32 * 1024 * 1024
MAX_LOG_BYTES = 16 * 1024 * 1024
#: Application states in which an application holds (or waits for) containers.
LIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
#: Every state of a NodeManager at the RM (its nodes API lists only RUNNING ones unless told).
NODE_STATES = ("NEW", "RUNNING", "UNHEALTHY", "DECOMMISSIONING", "DECOMMISSIONED", "LOST", "REBOOTED",
               "SHUTDOWN")
_APP_ID = re.compile(r"^application_\d{1,20}_\d{1,10}$")
_CONTAINER_ID = re.compile(r"^container_(e\d+_)?\d{1,20}_\d{1,10}_\d{1,10}_\d{1,12}$")


class RMError(Exception):
    """A REST call to YARN failed (no answer, an error status, or not JSON)."""


class ResourceManager:
    """A client of one cluster's RM web services (``/ws/v1/cluster``)."""

    def __init__(self, urls: list[str], timeout: float = 10.0, user: str | None = None) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.timeout = timeout
        self.user = user

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None, timeout: float = 10.0) -> ResourceManager:
        """The cluster ``HADOOP_CONF_DIR`` names; SpecError when none is named or readable."""
        from tfdist.backends.yarn import conf as yarn_conf
        from tfdist.errors import SpecError

        env = dict(os.environ if environ is None else environ)
        directory = yarn_conf.conf_dir(env)
        if directory is None:
            raise SpecError("HADOOP_CONF_DIR is not set: point it at the YARN cluster's client "
                            "configuration (the directory with yarn-site.xml)")
        # Hadoop's simple authentication: HADOOP_USER_NAME, else the login name (as its clients)
        user = env.get("HADOOP_USER_NAME") or _login_name()
        return cls(yarn_conf.rm_urls_from(directory), timeout, user)

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        errors = []
        for base in self.urls:
            url = base + path
            if self.user:
                url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"user.name": self.user})
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(url, data=data, method=method,
                                         headers={"Accept": "application/json",
                                                  "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as reply:
                    raw = reply.read(MAX_BODY + 1)
                    if len(raw) > MAX_BODY:
                        raise RMError(f"{method} {url}: the answer is larger than {MAX_BODY >> 20} MiB")
                    if base != self.urls[0]:  # keep the RM that answered first next time
                        self.urls.remove(base)
                        self.urls.insert(0, base)
                    return json.loads(raw) if raw.strip() else {}
            except urllib.error.HTTPError as err:
                if 300 <= err.code < 400 or err.code == 503:  # a standby RM: try the next
                    errors.append(f"{base}: HTTP {err.code} (a standby ResourceManager?)")
                    continue
                detail = err.read(2000).decode("utf-8", "replace")
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    detail = json.loads(detail)["RemoteException"]["message"]
                raise RMError(f"{method} {url}: HTTP {err.code}: {str(detail).strip()[:300]}") from None
            except (OSError, ValueError) as err:
                errors.append(f"{base}: {getattr(err, 'reason', None) or err}")
        raise RMError(f"no ResourceManager answers ({'; '.join(errors)})")

    def get(self, path: str) -> Any:
        return self._request("GET", path)

    def info(self) -> dict[str, Any]:
        return dict(self.get("/ws/v1/cluster/info").get("clusterInfo") or {})

    def app(self, app_id: str) -> dict[str, Any]:
        if not _APP_ID.fullmatch(app_id):
            raise RMError(f"not an application id: {app_id[:80]!r}")
        return dict(self.get(f"/ws/v1/cluster/apps/{app_id}").get("app") or {})

    def apps(self, tag: str | None = None, states: Iterable[str] = LIVE_STATES) -> list[dict[str, Any]]:
        """Applications in ``states`` (those carrying ``tag``, when given)."""
        query = {"states": ",".join(states)}
        if tag:
            query["applicationTags"] = tag
        found = (self.get("/ws/v1/cluster/apps?" + urllib.parse.urlencode(query)).get("apps") or {})
        return list(found.get("app") or [])

    def kill(self, app_id: str, diagnostics: str | None = None) -> str:
        """Ask the RM to kill an application (``diagnostics``: what the RM records as its
        reason); returns the state it reports."""
        if not _APP_ID.fullmatch(app_id):
            raise RMError(f"not an application id: {app_id[:80]!r}")
        body = {"state": "KILLED"} if diagnostics is None else {"state": "KILLED", "diagnostics": diagnostics}
        got = self._request("PUT", f"/ws/v1/cluster/apps/{app_id}/state", body)
        return str(got.get("state", ""))

    def end(self, app_ids: list[str], grace: float) -> bool:
        """Give ``app_ids`` ``grace`` seconds to end by themselves, then kill those still live.
        Returns whether every one was checked or killed (False: the RM did not answer)."""
        deadline = time.monotonic() + grace
        live, sure = list(app_ids), True
        while live and time.monotonic() < deadline:
            try:
                live, sure = [a for a in live if self.app(a).get("state") in LIVE_STATES], True
            except RMError:
                sure = False
            if live:
                time.sleep(0.5)
        for app_id in live:  # still live (queued, or an AM that did not notice): kill it
            try:
                self.kill(app_id)
            except RMError:
                sure = False
        return sure

    def nodes(self) -> list[dict[str, Any]]:
        """Every NodeManager the RM knows, in any state (``RUNNING``, ``LOST``, ...)."""
        found = self.get("/ws/v1/cluster/nodes?states=" + ",".join(NODE_STATES)).get("nodes") or {}
        return [n for n in (found.get("node") or []) if isinstance(n, dict)]

    def scheduler(self) -> dict[str, Any]:
        return dict(self.get("/ws/v1/cluster/scheduler"))

    def new_application(self) -> tuple[str, dict[str, Any]]:
        """A new application id and the cluster's largest container (``maximum-resource-capability``)."""
        got = self._request("POST", "/ws/v1/cluster/apps/new-application")
        app_id = str(got.get("application-id", ""))
        if not _APP_ID.fullmatch(app_id):
            raise RMError(f"the RM gave no application id: {str(got)[:200]}")
        return app_id, dict(got.get("maximum-resource-capability") or {})

    def submit(self, body: dict[str, Any]) -> None:
        self._request("POST", "/ws/v1/cluster/apps", body)

    def containers(self, app_id: str) -> list[dict[str, Any]]:
        """The live containers of every attempt of an application (id, node's web address,
        allocated resources), and each attempt's AM container (id and node only, marked
        ``amContainer``: it is listed among the live ones too while it runs)."""
        out = []
        attempts = (self.get(f"/ws/v1/cluster/apps/{app_id}/appattempts").get("appAttempts") or {})
        for attempt in attempts.get("appAttempt") or []:
            attempt_id = str(attempt.get("appAttemptId", ""))
            if not attempt_id.startswith("appattempt_"):
                continue
            got = self.get(f"/ws/v1/cluster/apps/{app_id}/appattempts/{attempt_id}/containers")
            listed = got.get("container") or (got.get("containers") or {}).get("container") or []
            if isinstance(listed, dict):  # one container comes as an object, not a list
                listed = [listed]
            out += [c for c in listed if isinstance(c, dict)]
            if attempt.get("containerId") and attempt.get("nodeHttpAddress"):
                out.append({"containerId": attempt["containerId"],
                            "nodeHttpAddress": attempt["nodeHttpAddress"], "amContainer": True})
        return out


def _login_name() -> str | None:
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None


def node_log(node_http: str, container_id: str, name: str, timeout: float = 10.0) -> bytes | None:
    """One log file of a container from its NodeManager (running or finished, until the
    NodeManager deletes or aggregates it); None when it has none by that name."""
    if not _CONTAINER_ID.fullmatch(container_id) or not re.fullmatch(r"[\w.-]{1,100}", name):
        return None
    base = node_http if node_http.startswith(("http://", "https://")) else f"http://{node_http}"
    url = f"{base.rstrip('/')}/ws/v1/node/containerlogs/{container_id}/{name}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return bytes(reply.read(MAX_LOG_BYTES))
    except (OSError, ValueError):
        return None


def node_container(node_http: str, container_id: str, timeout: float = 5.0) -> dict[str, Any] | None:
    """A container as its NodeManager reports it (``state``, ``exitCode``, ``diagnostics``;
    kept while its application runs), or None when the NodeManager cannot be asked."""
    if not _CONTAINER_ID.fullmatch(container_id):
        return None
    base = node_http if node_http.startswith(("http://", "https://")) else f"http://{node_http}"
    request = urllib.request.Request(f"{base.rstrip('/')}/ws/v1/node/containers/{container_id}",
                                     headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            got = json.loads(reply.read(1 << 20))
    except (OSError, ValueError):
        return None
    container = got.get("container") if isinstance(got, dict) else None
    return container if isinstance(container, dict) else None


def save_logs(containers: dict[str, str], dest: Path, names: Iterable[str] = ("stdout", "stderr")) -> int:
    """Copy each container's logs (``{container_id: node_http}``) to ``dest/CONTAINER/NAME``;
    returns how many files were written."""
    count = 0
    for container_id, node in sorted(containers.items()):
        for name in names:
            data = node_log(node, container_id, name)
            if data is None:
                continue
            folder = dest / container_id
            with contextlib.suppress(OSError):
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(data)
                count += 1
    return count

"""A fake Kubernetes API server on 127.0.0.1 that plays pod lifecycles with their output.

Kept only for what the real control plane of `make kube-up` (kwok instead of a kubelet)
cannot play: a container's log stream that *ends when the container exits* (kwok serves a
log from a file and keeps a followed stream open, having no container to wait for; the
real tests cover streaming itself, test_real_backend.py), so the order of the last lines
and Exited; and exact request counts (pods watched, not polled). Creation, scheduling, exit
codes and every pod failure reason (OOMKilled, image pulls, CrashLoopBackOff, eviction,
Unschedulable), restarts, clean-up and RBAC are tested against the real API server in
test_real_*.py.

The real ``kubernetes`` client talks to it over HTTP (chunked watch and log streams, as
the real API server sends them). It knows the few endpoints tfdist uses: create, list,
watch and delete pods, read a pod's log (``follow``), create and delete Services and
NetworkPolicies. Each task's pod plays a *script*, chosen per task and attempt:

``ok``            Pending (ContainerCreating) -> Running, prints, -> Succeeded (0)
``fail``          Running, prints, -> Failed (exit 1, reason Error)
``hang``          Running until deleted (then exit 143, as after SIGTERM)

Lifecycles follow what the kubelet reports; timings are shortened to tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

STEP = 0.05
PROGRESS = 'TFDIST_PROGRESS {"epoch": 1, "loss": 0.5}'


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class FakeCluster:
    """The state: objects, a resourceVersion counter, an event history, logs."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.version = 100
        self.pods: dict[str, dict[str, Any]] = {}
        self.others: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name)
        self.created_others: list[dict[str, Any]] = []  # every one ever created, in order
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.logs: dict[str, list[str]] = {}
        self.log_done: dict[str, bool] = {}
        self.scripts: dict[str, list[str] | str] = {}  # task name -> script(s) per attempt
        self.requests: list[tuple[str, str]] = []
        self.deleted_pods: list[str] = []
        self.stopping = False
        self.throttle = 0  # this many next pod creates are shed (429, as API priority and fairness)

    # -- state changes (call with the lock held) ----------------------------------------

    def _bump(self, kind: str, pod: dict[str, Any]) -> None:
        self.version += 1
        pod["metadata"]["resourceVersion"] = str(self.version)
        self.history.append((self.version, kind, copy.deepcopy(pod)))
        self.lock.notify_all()

    def create_pod(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body["metadata"]["name"]
        with self.lock:
            if name in self.pods:
                return 409, _status(409, "AlreadyExists", f'pods "{name}" already exists')
            pod = copy.deepcopy(body)
            pod["metadata"].update(uid=f"uid-{name}", creationTimestamp=_now())
            pod["status"] = {"phase": "Pending", "conditions": []}
            self.pods[name] = pod
            self.logs[name] = []
            self.log_done[name] = False
            self._bump("ADDED", pod)
        labels = pod["metadata"].get("labels", {})
        task = labels.get("tfdist.io/task", "")
        attempt = int(labels.get("tfdist.io/attempt", "0"))
        script = self.scripts.get(task, "ok")
        if isinstance(script, list):
            script = script[min(attempt, len(script) - 1)]
        threading.Thread(target=self._play, args=(name, script), daemon=True).start()
        return 201, pod

    def _update(self, name: str, change: Any) -> bool:
        with self.lock:
            pod = self.pods.get(name)
            if pod is None or self.stopping:
                return False
            if pod["metadata"].get("deletionTimestamp") and not getattr(change, "final", False):
                return False
            change(pod)
            self._bump("MODIFIED", pod)
            return True

    def _say(self, name: str, *lines: str) -> None:
        with self.lock:
            if name in self.logs:
                self.logs[name].extend(lines)
                self.lock.notify_all()

    def _end_log(self, name: str) -> None:
        with self.lock:
            self.log_done[name] = True
            self.lock.notify_all()

    # -- lifecycles ---------------------------------------------------------------------

    def _play(self, name: str, script: str) -> None:
        time.sleep(STEP)
        self._update(name, _scheduled)
        time.sleep(STEP)
        self._update(name, _running)
        self._say(name, f"{name} starting")
        time.sleep(STEP)
        if script == "ok":
            self._say(name, PROGRESS, "done")
            self._end_log(name)
            self._update(name, _terminated(0, "Completed", "Succeeded"))
        elif script == "fail":
            self._say(name, "Traceback (most recent call last):", "ValueError: boom")
            self._end_log(name)
            self._update(name, _terminated(1, "Error", "Failed"))
        # hang: runs until deleted

    def delete_pod(self, name: str, grace: float) -> tuple[int, dict[str, Any]]:
        with self.lock:
            pod = self.pods.get(name)
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            pod["metadata"]["deletionTimestamp"] = _now()
            pod["metadata"]["deletionGracePeriodSeconds"] = int(grace)
            self._bump("MODIFIED", pod)
            running = "running" in _state(pod)
        threading.Thread(target=self._terminate, args=(name, running), daemon=True).start()
        return 200, pod

    def _terminate(self, name: str, running: bool) -> None:
        if running:  # the kubelet sends SIGTERM; the process exits 143
            time.sleep(STEP)
            self._end_log(name)
            change = _terminated(143, "Error", "Failed")
            change.final = True  # type: ignore[attr-defined]
            self._update(name, change)
        time.sleep(STEP)
        with self.lock:
            pod = self.pods.pop(name, None)
            self.log_done[name] = True
            if pod is not None:
                self.deleted_pods.append(name)
                self._bump("DELETED", pod)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def _cstatus(pod: dict[str, Any], state: dict[str, Any]) -> None:
    main = pod["spec"]["containers"][0]
    status = {
        "name": main["name"],
        "image": main["image"],
        "imageID": "",
        "ready": "running" in state,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
    }
    pod["status"]["containerStatuses"] = [status]


def _state(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod["status"].get("containerStatuses") or [{}]
    return statuses[0].get("state") or {}


def _scheduled(pod: dict[str, Any]) -> None:
    pod["spec"]["nodeName"] = "node-1"
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}]
    _cstatus(pod, {"waiting": {"reason": "ContainerCreating"}})


def _running(pod: dict[str, Any]) -> None:
    pod["status"]["phase"] = "Running"
    pod["status"]["podIP"] = "10.0.0.7"
    _cstatus(pod, {"running": {"startedAt": _now()}})


def _terminated(code: int, reason: str, phase: str) -> Any:
    def change(pod: dict[str, Any]) -> None:
        pod["status"]["phase"] = phase
        started = (_state(pod).get("running") or {}).get("startedAt", _now())
        state = {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": started,
                "finishedAt": _now(),
            }
        }
        _cstatus(pod, state)

    return change


def _matches(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj["metadata"].get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster: FakeCluster

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # -- plumbing -----------------------------------------------------------------------

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else {}

    def _json(self, code: int, obj: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        self.cluster.requests.append((method, url.path))
        # /api/v1/namespaces/NS/KIND[/NAME[/log]]  or  /apis/G/V/namespaces/NS/KIND[/NAME]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        if len(rest) < 2 or rest[0] != "namespaces":
            return self._json(404, _status(404, "NotFound", url.path))
        kind = rest[2] if len(rest) > 2 else ""
        name = rest[3] if len(rest) > 3 else None
        sub = rest[4] if len(rest) > 4 else None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._dispatch(method, kind, name, sub, query)

    def _dispatch(  # noqa: C901 - one flat branch per API route the fake serves
        self, method: str, kind: str, name: str | None, sub: str | None, query: dict[str, str]
    ) -> None:
        c = self.cluster
        if kind == "pods":
            if method == "POST":
                with c.lock:
                    shed, c.throttle = c.throttle > 0, max(0, c.throttle - 1)
                if shed:
                    self._body()
                    return self._json(429, _status(429, "TooManyRequests", "too many requests"),
                                      {"Retry-After": "1"})
                return self._json(*c.create_pod(self._body()))
            if method == "GET" and name and sub == "log":
                return self._log(name, query)
            if method == "GET" and query.get("watch", "").lower() == "true":
                return self._watch(query)
            if method == "GET":
                with c.lock:
                    items = [
                        copy.deepcopy(p) for p in c.pods.values() if _matches(p, query.get("labelSelector"))
                    ]
                    version = str(c.version)
                return self._json(
                    200,
                    {
                        "kind": "PodList",
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": version},
                        "items": items,
                    },
                )
            if method == "DELETE" and name:
                body = self._body()
                grace = float(body.get("gracePeriodSeconds", query.get("gracePeriodSeconds", 30)))
                return self._json(*c.delete_pod(name, grace))
            if method == "DELETE":
                self._body()
                with c.lock:
                    names = [n for n, p in c.pods.items() if _matches(p, query.get("labelSelector"))]
                for n in names:
                    c.delete_pod(n, 0)
                return self._json(200, {"kind": "PodList", "apiVersion": "v1", "items": []})
        if kind in ("services", "networkpolicies", "configmaps"):
            key = (kind, name or "")
            if method == "DELETE" and not name:  # a collection, by label
                self._body()
                with c.lock:
                    keys = [k for k, o in c.others.items() if k[0] == kind and _matches(o, query.get("labelSelector"))]
                    for k in keys:
                        c.others.pop(k)
                return self._json(200, {"kind": "List", "apiVersion": "v1", "items": []})
            if method == "POST":
                body = self._body()
                key = (kind, body["metadata"]["name"])
                with c.lock:
                    if key in c.others:
                        return self._json(409, _status(409, "AlreadyExists", f"{key} exists"))
                    c.others[key] = body
                    c.created_others.append(body)
                return self._json(201, body)
            if method == "DELETE":
                self._body()
                with c.lock:
                    found = c.others.pop(key, None)
                if found is None:
                    return self._json(404, _status(404, "NotFound", f"{key} not found"))
                return self._json(200, found)  # as the API server: the deleted object
        return self._json(404, _status(404, "NotFound", f"{method} {kind}"))

    def _watch(self, query: dict[str, str]) -> None:
        c = self.cluster
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
        selector = query.get("labelSelector")
        self._start_stream("application/json")
        while True:
            with c.lock:
                fresh = [e for e in c.history if e[0] > since]
                if not fresh:
                    if c.stopping or time.monotonic() >= deadline:
                        break
                    c.lock.wait(0.1)
                    continue
            for version, kind, obj in fresh:
                since = version
                if _matches(obj, selector):
                    self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
        self._end_stream()

    def _log(self, name: str, query: dict[str, str]) -> None:
        c = self.cluster
        with c.lock:
            if name not in c.logs:
                return self._json(404, _status(404, "NotFound", f'pods "{name}" not found'))
        follow = query.get("follow", "").lower() == "true"
        self._start_stream("text/plain")
        sent = 0
        while True:
            with c.lock:
                lines = c.logs.get(name, [])[sent:]
                done = c.log_done.get(name, True) or c.stopping
                if not lines and not done and follow:
                    c.lock.wait(0.1)
                    continue
            for line in lines:
                self._chunk(line.encode() + b"\n")
            sent += len(lines)
            if not follow or (done and not lines):
                break
        self._end_stream()

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")


class FakeAPIServer:
    """``with FakeAPIServer() as server:`` ... ``server.url``, ``server.cluster``."""

    def __init__(self) -> None:
        self.cluster = FakeCluster()
        handler = type("Handler", (_Handler,), {"cluster": self.cluster})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.cluster.lock:
            self.cluster.stopping = True
            self.cluster.lock.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def api_client(self) -> Any:
        from kubernetes import client

        config = client.Configuration(host=self.url)
        return client.ApiClient(config)

    def kubeconfig(self) -> str:
        """A kubeconfig that points the client here (for the CLI, via KUBECONFIG)."""
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )

"""Thin helpers over the official ``kubernetes`` client, shared by the backend and the reaper.

tfdist works on plain dicts: every request goes through :func:`call` (or :func:`request`),
which uses the client's own connection pool, authentication and TLS but not its generated
API methods; errors become one BackendError line (:func:`api_error`). The client is
imported inside the functions, so importing this module stays light.

Why not the generated methods: they validate a dict body into the client's pydantic model
and serialize it back, and check every argument, ~0.4 ms of this process's CPU per pod
create and as much per log request (by hand, 200 creates: 1.40 against 1.04 ms each), CPU
taken from the API server on a shared machine at 1,000 pods; their module takes ~0.4 s of
CPU to import, before the first create; and their models would reject fields they do not
know (seen with a deleted Service's status), failing a call that had succeeded.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from typing import Any
from urllib.parse import quote

from tfdist.errors import BackendError, SpecError

#: The collection of each kind tfdist creates, in a namespace (``{}``).
COLLECTIONS = {
    "Pod": "/api/v1/namespaces/{}/pods",
    "ConfigMap": "/api/v1/namespaces/{}/configmaps",
    "Service": "/api/v1/namespaces/{}/services",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{}/networkpolicies",
}


def path(kind: str, namespace: str, name: str = "", sub: str = "") -> str:
    """The API path of a namespace's objects of ``kind``, of one of them, or of one's
    subresource (a pod's ``log``)."""
    found = COLLECTIONS[kind].format(quote(namespace, safe=""))
    for part in (name, sub):
        if part:
            found += "/" + quote(part, safe="")
    return found


def call(api_client: Any, method: str, url_path: str, *, body: dict[str, Any] | None = None,
         query: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
    """Send one request through ``api_client`` and return the unread response (urllib3's:
    ``.data``, ``.stream()``, ``release_conn()``); a status outside 2xx raises the client's
    ApiException (status, headers, body), as its generated methods do. The body is sent
    as JSON as it is: tfdist's objects are plain dicts."""
    from kubernetes.client.exceptions import ApiException

    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    params = [(k, v) for k, v in (query or {}).items() if v is not None]
    method, url, headers, _, _ = api_client.param_serialize(
        method, url_path, query_params=params, header_params=headers, auth_settings=["BearerToken"]
    )
    resp = api_client.call_api(method, url, headers, body, _request_timeout=timeout)
    if not 200 <= resp.status <= 299:
        resp.read()
        resp.response.release_conn()
        raise ApiException.from_response(http_resp=resp, body=None, data=None)
    return resp.response


def request(api_client: Any, method: str, url_path: str, **kwargs: Any) -> bytes:
    """:func:`call`, the response body read whole and the connection given back."""
    resp = call(api_client, method, url_path, **kwargs)
    try:
        return bytes(resp.data)
    finally:
        resp.release_conn()


def api_error(err: Exception, what: str) -> BackendError:
    status = getattr(err, "status", None)
    body = getattr(err, "body", None)
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    if body:
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(body).get("message") or message
    prefix = f"{status} " if status else ""
    return BackendError(f"kubernetes: {what} failed: {prefix}{message}")


def retry_after(err: Exception) -> float | None:
    """Seconds to wait before sending again a request the server shed (429: API priority
    and fairness had no seat or queue room for it), from its Retry-After; None for any
    other error."""
    if getattr(err, "status", None) != 429:
        return None
    headers = getattr(err, "headers", None) or {}
    try:
        return min(30.0, max(0.1, float(headers.get("Retry-After", 1))))
    except (TypeError, ValueError):
        return 1.0


def interrupt(resp: Any) -> None:
    """End a streaming response that another thread is reading.

    ``resp.close()`` would wait for the reader's lock until the next byte arrives (up to
    the watch timeout); shutting the socket down makes the blocked read return at once.
    """
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def load_configuration() -> Any:
    """The client's Configuration from the in-cluster service account or the kubeconfig
    (KUBECONFIG, else ``~/.kube/config``); read before anything is made, so a missing,
    unreadable or malformed one is bad input (exit 2) in one line, not a failed run."""
    from kubernetes import client, config

    conf = client.Configuration()
    incluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        if not incluster:
            _refuse_special_files()
        if incluster:
            config.load_incluster_config(client_configuration=conf)
        else:
            config.load_kube_config(client_configuration=conf)
    except Exception as err:  # the client raises several unrelated types here
        detail = " ".join(str(err).split()) or type(err).__name__  # a YAML error spans lines
        if len(detail) > 200:
            detail = detail[:200] + "..."
        where = ("the pod's service account" if incluster
                 else f"the kubeconfig {os.environ.get('KUBECONFIG') or '~/.kube/config'}")
        raise SpecError(
            f"kubernetes: cannot read {where} ({detail}); set KUBECONFIG to a readable kubeconfig "
            "file, or run in a pod"
        ) from None
    return conf


def _refuse_special_files() -> None:
    """The client opens each kubeconfig in KUBECONFIG with a blocking read: a FIFO would hang
    tfdist, a device could be read without end. Raised as the kubeconfig's error."""
    given = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    for name in filter(None, given.split(os.pathsep)):
        try:
            mode = os.stat(name).st_mode
        except OSError:
            continue  # missing or unreadable: the client says which
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise ValueError(f"{name} is a FIFO, device or socket, not a file")


def load_api_client(pool_size: int | None = None, conf: Any = None) -> Any:
    """An ApiClient from ``conf`` (default: :func:`load_configuration`).

    ``pool_size``: connections kept open for reuse, to match the requests the caller sends
    at once (the client's default, 5 per CPU, would open and drop connections, each a TLS
    handshake, when more are in flight than that)."""
    from kubernetes import client

    conf = conf if conf is not None else load_configuration()
    if pool_size:
        conf.connection_pool_maxsize = pool_size
    return client.ApiClient(conf)


def delete_run_objects(
    api_client: Any, namespace: str, selector: str, objects: list[tuple[str, str]]
) -> list[str]:
    """Delete a run's pods and its ConfigMap (by label, one request each) and the given
    (kind, name) Services and NetworkPolicies; return a line for each failure. Already gone
    is not a failure.

    By label, the ConfigMap goes even if tfdist died between creating it and telling the
    reaper. Shared by :meth:`KubernetesBackend.close` and the reaper (:mod:`.reaper`)."""
    problems = []
    for what, kind in (("pods", "Pod"), ("configmaps", "ConfigMap")):
        try:
            query = {"labelSelector": selector, "gracePeriodSeconds": 0}
            request(api_client, "DELETE", path(kind, namespace), query=query)
        except Exception as err:
            problems.append(f"deleting {what}: {api_error(err, 'delete')}")
    for kind, name in reversed(objects):
        if kind not in ("Service", "NetworkPolicy"):
            continue  # the ConfigMap: deleted by label above
        try:
            request(api_client, "DELETE", path(kind, namespace, name))
        except Exception as err:
            if getattr(err, "status", None) != 404:
                problems.append(f"deleting {kind} {name}: {api_error(err, 'delete')}")
    return problems

"""One watch on a run's pods: list, then watch from the list's resourceVersion, re-list when
the server says the version is gone, resume after a broken connection.

State changes arrive as they happen, not at a polling interval, over one connection per run
(the server ends each watch request after ``timeout`` seconds; it is then resumed from the
last version seen, bookmarks included, so nothing is listed again). What a pod's state means
is not decided here: every object goes to ``on_pod`` (the backend, which asks
:func:`.pods.observe`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from tfdist.backends.k8s.client import call, interrupt, path, request
from tfdist.backends.k8s.pods import iter_lines


class PodWatch:
    """Feed ``on_pod(kind, pod)`` with every pod matching ``selector`` until ``closing``."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        selector: str,
        on_pod: Callable[[str, dict[str, Any]], None],
        note: Callable[[str], None],
        closing: threading.Event,
        timeout: int = 30,
    ) -> None:
        self.api_client = api_client
        self.selector = selector
        self.on_pod = on_pod
        self.note = note
        self.closing = closing
        #: Server-side timeout of one watch request (the watch is then resumed).
        self.timeout = timeout
        self._pods = path("Pod", namespace)
        self._resp: Any = None

    def run(self) -> None:
        """List, then watch from the list's resourceVersion; re-list when it expires."""
        version: str | None = None
        while not self.closing.is_set():
            try:
                if version is None:
                    listing = json.loads(request(self.api_client, "GET", self._pods,
                                                 query={"labelSelector": self.selector}))
                    version = listing["metadata"].get("resourceVersion")
                    for item in listing.get("items") or []:
                        self.on_pod("MODIFIED", item)
                query = {"labelSelector": self.selector, "watch": True, "resourceVersion": version,
                         "timeoutSeconds": self.timeout, "allowWatchBookmarks": True}
                resp = call(self.api_client, "GET", self._pods, query=query)
                self._resp = resp
                for line in iter_lines(resp.stream(amt=None, decode_content=False)):
                    if self.closing.is_set():
                        break
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = None  # 410 Gone and friends: list again
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        self.on_pod(event["type"], obj)
                resp.release_conn()
            except Exception as err:
                if self.closing.is_set():
                    return
                self.note(f"watch interrupted ({type(err).__name__}: {err}); resuming")
                version = None
                self.closing.wait(0.5)
            finally:
                self._resp = None

    def interrupt(self) -> None:
        """Break the watch request in flight (``closing`` must be set first, or it resumes)."""
        interrupt(self._resp)

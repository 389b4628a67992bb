"""What the driver asks a Spark master before any JVM starts: does it answer, and (for a
standalone master) how big is its cluster. Reads only; the decisions are in :mod:`.plan`.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from typing import Any
from urllib.parse import urlparse

from tfdist.backends.spark.plan import master_endpoints

#: A status page larger than this is not read whole (a hostile or broken endpoint).
MAX_STATUS_BYTES = 8 << 20


def fetch_status(ui: str, timeout: float = 3.0) -> tuple[dict[str, Any] | None, str]:
    """A standalone master's JSON status page, or None and why it could not be read."""
    url = ui.rstrip("/") + "/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            data = json.loads(reply.read(MAX_STATUS_BYTES))
    except (OSError, ValueError) as err:  # refused, timed out, HTTP error, not JSON, bad URL
        reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or err
        return None, f"{url}: {reason}"
    if not isinstance(data, dict) or "workers" not in data:
        return None, f"{url}: not a Spark master's status page"
    return data, ""


def unreachable(master: str, timeout: float = 3.0) -> str | None:
    """Why no master answers at a ``spark://`` or ``k8s://`` URL (None when one does)."""
    if master.startswith("spark://"):
        targets = master_endpoints(master)
    else:
        url = urlparse(master[len("k8s://"):])
        targets = [(url.hostname or "", url.port or (443 if url.scheme == "https" else 80))]
    errors = []
    for host, port in targets:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return None
        except OSError as err:
            errors.append(f"{host}:{port}: {err.strerror or err}")
    return "; ".join(errors)

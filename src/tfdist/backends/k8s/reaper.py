"""Delete a Kubernetes run's pods, ConfigMaps, Service and NetworkPolicy if tfdist dies without
doing so.

The local backend's guardian (node/guardian.py) kills process groups when tfdist is
SIGKILLed; this is the same idea for a cluster, where what must not outlive tfdist are API objects.
Pods have ``restartPolicy: Never`` and nobody else watches them: without this, a ps pod
left by a killed supervisor would run (and hold its node) forever.

Run as ``python -m tfdist.backends.k8s.reaper``; it reads lines from stdin:

- first, one JSON object: ``namespace``, ``selector`` (the run's pod label selector) and
  ``config`` (the API client's connection settings when tfdist was handed a client; null
  means load the configuration the way tfdist does: in-cluster or KUBECONFIG);
- ``+KIND NAME`` for each ConfigMap, Service or NetworkPolicy tfdist created (the
  ConfigMaps, the cluster map's, the shipped workdir's and the leave program's, are
  deleted by label, like the pods);
- ``exit`` when tfdist has cleaned up itself.

It waits with the stdin watchdog (:mod:`tfdist.node.watchdog`) the guardian and the YARN
reaper use. At end-of-file without ``exit`` (tfdist was killed or crashed) it deletes the run's pods and
ConfigMap by label and the objects it was told of, then, :data:`SETTLE` seconds later, the run's pods
by label once more: tfdist sends several pod creates at once, and one it sent just before
it died may reach the API server after the first delete. Then it exits. It waits on stdin
without importing the kubernetes client, so it costs a few megabytes until it has work to do.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from tfdist.node import watchdog

#: Connection settings copied from a client's Configuration to rebuild it here.
CONFIG_FIELDS = (
    "host",
    "api_key",
    "api_key_prefix",
    "ssl_ca_cert",
    "cert_file",
    "key_file",
    "verify_ssl",
    "proxy",
)
#: Seconds between the two deletes by label (a create in flight lands within its timeout,
#: but on a live server within milliseconds; the second pass is for those).
SETTLE = 3.0


def config_of(api_client: Any) -> dict[str, Any]:
    """The settings of ``api_client`` the reaper needs to reach the same API server."""
    conf = api_client.configuration
    return {name: getattr(conf, name, None) for name in CONFIG_FIELDS}


def _client(settings: dict[str, Any] | None) -> Any:
    from kubernetes import client

    from tfdist.backends.k8s.client import load_api_client

    if settings is None:
        return load_api_client()
    conf = client.Configuration()
    for name, value in settings.items():
        if name in CONFIG_FIELDS and value is not None:
            setattr(conf, name, value)
    return client.ApiClient(conf)


def reap(header: dict[str, Any], objects: list[tuple[str, str]]) -> list[str]:
    """Delete what the run left; return one line per failure (nothing to do is no failure)."""
    from tfdist.backends.k8s.client import delete_run_objects

    return delete_run_objects(_client(header.get("config")), header["namespace"], header["selector"], objects)


def main() -> None:
    told: list[str] = []
    if watchdog.watch(told.append) or not told or not told[0]:
        return  # tfdist cleaned up itself, or died before saying what to watch (it created nothing yet)
    header = json.loads(told[0])
    objects = [(kind, name) for word in told[1:] if word.startswith("+")
               for kind, _, name in [word[1:].partition(" ")]]
    for problem in reap(header, objects):
        print(f"tfdist k8s reaper: {problem}", file=sys.stderr)
    time.sleep(SETTLE)
    for problem in reap(header, []):
        print(f"tfdist k8s reaper: {problem}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""The job's working directory as it travels to the yarn backend's containers: packed once
into the run's ``.tar.gz`` (as the Spark backend packs it: :mod:`tfdist.backends.agent.workdir`,
same excludes and size limits) and sent to each container's agent over its authenticated
channel, in ``put`` messages it unpacks before the first task starts
(:class:`tfdist.node.yarn_container.WorkdirReceiver`).

Why over the channel and not through YARN's localization: the distributed shell AM localizes
only files already on the cluster's file system under its own naming, and tfdist has no
HDFS client (nothing of Hadoop on the submit side but REST). The agents connect back to
tfdist anyway; the archive's size and SHA-256 travel with the job through the RM, so an agent
unpacks only the archive tfdist packed. The cost: every container fetches its own copy from
the submitting machine (as Spark executors fetch ``spark.archives`` from a standalone
driver), so a big workdir times many containers is that machine's upload.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tfdist.backends.agent import workdir as agent_workdir

#: Raw bytes per ``put`` message (base64 makes it 4/3 of that on the wire, far below
#: :data:`tfdist.node.agent.MAX_MESSAGE`).
CHUNK = 1 << 20


def pack(workdir: Path, dest: Path, skip: list[Path]) -> dict[str, Any]:
    """Pack ``workdir`` into ``dest``; returns what the agents check it by (size, SHA-256)."""
    agent_workdir.pack_workdir(workdir, dest, skip)
    digest = hashlib.sha256()
    with open(dest, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return {"size": dest.stat().st_size, "sha256": digest.hexdigest()}


def put_messages(archive: Path) -> Iterator[dict[str, Any]]:
    """The ``put`` messages that carry ``archive`` to one agent (the last says ``end``)."""
    with open(archive, "rb") as f:
        block = f.read(CHUNK)
        while True:
            following = f.read(CHUNK) if block else b""
            yield {"op": "put", "data": base64.b64encode(block).decode(), "end": not following}
            if not following:
                return
            block = following

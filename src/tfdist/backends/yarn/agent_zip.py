"""The yarn backend's agent as it travels: a small zip of the agent and the few tfdist
modules it imports, put on ``sys.path`` in each container (the environment carries it
base64-encoded: :func:`tfdist.backends.yarn.plan.container_env`). A container needs no
installed tfdist, only a Python."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from tfdist import contract, states
from tfdist.backends import guardian, procs, spare_program, spares
from tfdist.backends.spark import agent as spark_agent
from tfdist.backends.yarn import agent as yarn_agent
from tfdist.backends.yarn import protowire

#: What the agent imports (standard library aside); a test imports the zip in a bare Python.
SHIPPED = (guardian, procs, spark_agent, yarn_agent, protowire, spares, spare_program, contract, states)


def build() -> bytes:
    """The zip (the packages' ``__init__`` files empty: the containers need no more of tfdist)."""
    files: dict[str, bytes] = {}
    for module in SHIPPED:
        parts = module.__name__.split(".")
        for depth in range(1, len(parts)):
            files.setdefault("/".join(parts[:depth]) + "/__init__.py", b"")
        files["/".join(parts) + ".py"] = Path(str(module.__file__)).read_bytes()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()

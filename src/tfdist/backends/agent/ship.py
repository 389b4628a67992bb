"""The node package as it travels to a YARN container: a small zip of :mod:`tfdist.node`,
whole, and the two base modules it shares with the rest of tfdist (:mod:`tfdist.contract`,
:mod:`tfdist.states`), put on ``sys.path`` in each container (the environment carries it
base64-encoded: :func:`tfdist.backends.yarn.plan.container_env`). A container needs no
installed tfdist, only a Python."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from types import ModuleType

from tfdist import contract, node, states

#: The modules outside the node package that it imports (both standard library only);
#: tests/test_structure.py checks that the node package imports nothing else of tfdist.
BASE: tuple[ModuleType, ...] = (contract, states)


def shipped_files() -> dict[str, bytes]:
    """Each shipped file's path inside the zip and its bytes (``tfdist/__init__.py`` empty:
    a container needs no more of tfdist)."""
    root = Path(str(node.__file__)).parent
    files: dict[str, bytes] = {"tfdist/__init__.py": b""}
    for path in sorted(root.glob("*.py")):
        files[f"tfdist/node/{path.name}"] = path.read_bytes()
    for module in BASE:
        files[f"tfdist/{Path(str(module.__file__)).name}"] = Path(str(module.__file__)).read_bytes()
    return files


def build() -> bytes:
    """The zip of :func:`shipped_files`."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in shipped_files().items():
            zf.writestr(name, data)
    return buf.getvalue()

"""The node package as it travels to a YARN container: a small zip of :mod:`tfdist.node`,
whole, and the two base modules it shares with the rest of tfdist (:mod:`tfdist.contract`,
:mod:`tfdist.states`), put on ``sys.path`` in each container (the environment carries it
base64-encoded: :func:`tfdist.backends.yarn.plan.container_env`). A container needs no
installed tfdist, only a Python."""

from __future__ import annotations

import importlib
import io
import pkgutil
import zipfile
from pathlib import Path
from types import ModuleType

from tfdist import contract, node, states

#: The modules outside the node package that it imports (both standard library only);
#: tests/test_structure.py checks that the node package imports nothing else of tfdist.
BASE: tuple[ModuleType, ...] = (contract, states)


def by_value() -> list[ModuleType]:
    """Every module of the node package and its two base modules, imported: what Spark and
    Ray register to be pickled by value, so that whatever a shipped function reaches of
    the node package travels with it (a module left out of a hand-kept list would be looked
    up on a node that has no tfdist: ModuleNotFoundError there, not here)."""
    names = [m.name for m in pkgutil.iter_modules(node.__path__)]
    found = [importlib.import_module(f"{node.__name__}.{name}") for name in names]
    return [*found, *BASE]


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

"""TensorFlow's import with the cyclic garbage collector paused, and what it made frozen after.

Why (docs/runtime.md, "A faster task start"): importing tensorflow and tf_keras makes a few
million objects that live as long as the process (modules, functions, classes, op and proto
descriptors) and little garbage. Meanwhile the collector runs its young generations thousands
of times over them, and after the import every full collection walks them all again, through
the first steps' tracing too. Pausing the collector while such a package executes, then moving
every object that exists into the permanent generation (:func:`gc.freeze`, which the Python
documentation suggests for objects a process makes at its start), leaves them out of every
later collection: a task starts, and restarts, sooner.

What it changes for a script: a cycle of garbage the import left is never collected (a few MB
at most, measured); reference counting frees everything else as before; the collector runs as
before on what the script makes after; ``gc.unfreeze()`` undoes it. A script that turned the
collector off itself is left alone, and ``TFDIST_FREEZE_IMPORTS=0`` in a task's environment
turns this off.

:func:`install` is called by ``import tfdist.runtime`` (a training script imports it before
TensorFlow). Standard library only: node code.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

#: The top-level packages whose import runs with the collector paused, then frozen.
PACKAGES = frozenset({"tensorflow", "tf_keras", "keras"})
#: The environment variable that turns it off (``0``).
SWITCH = "TFDIST_FREEZE_IMPORTS"


class FrozenImport(MetaPathFinder):
    """A finder first on ``sys.meta_path`` that finds nothing itself: for one of ``packages``,
    not yet imported, it asks the finders after it and gives their spec's loader (that loader
    instance only: a file finder makes one per module) an ``exec_module`` that runs the
    package with the collector paused and freezes what exists once it has run."""

    def __init__(self, packages: Iterable[str] = PACKAGES) -> None:
        self.packages = frozenset(packages)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in self.packages or not gc.isenabled():
            return None  # not ours, or inside another paused import, or the script's own choice
        spec = self._find_after(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # the import goes on as if this finder were not there
        try:
            spec.loader.exec_module = _paused(spec.loader, spec.loader.exec_module)  # type: ignore[method-assign,assignment]
        except AttributeError:  # a loader with slots: leave it alone
            return None
        return spec

    def _find_after(self, fullname: str, path: Sequence[str] | None,
                    target: ModuleType | None) -> ModuleSpec | None:
        finders = sys.meta_path
        after = finders[finders.index(self) + 1:] if self in finders else finders
        for finder in after:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                return spec  # type: ignore[no-any-return]
        return None


def _paused(loader: object, run: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    def exec_module(module: ModuleType) -> None:
        del loader.exec_module  # type: ignore[attr-defined]  # the loader as it was, from now on
        gc.disable()
        try:
            run(module)
        except BaseException:
            gc.enable()
            raise
        gc.freeze()
        gc.enable()

    return exec_module


def install() -> None:
    """Put a :class:`FrozenImport` first on ``sys.meta_path``, once; nothing where
    ``TFDIST_FREEZE_IMPORTS=0``."""
    if os.environ.get(SWITCH) == "0" or any(isinstance(f, FrozenImport) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, FrozenImport())

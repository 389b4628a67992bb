"""Builds the port guard's bind interposer at install (everything else is in pyproject.toml).

``src/tfdist/backends/loopback_bind.c`` is an ``LD_PRELOAD`` library, not a Python module:
it is declared as an extension so that every install (a wheel, an sdist, ``pip install -e``)
builds it and the wheel is tagged for the platform, and :class:`BuildInterposer` compiles it
as tfdist would on first use (``cc -shared -fPIC -O2 ... -ldl``: none of Python's flags, no
run path into the Python installation, which would be searched by every task it is preloaded
into) to ``tfdist/backends/loopback-bind.so``, a name no import can reach. The extension is
optional: with no C compiler the install still succeeds, and tfdist compiles the library on
first use once a compiler is there (see :mod:`tfdist.backends.netguard`, docs/security.md).
"""

from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

INTERPOSER = "tfdist.backends.loopback_bind"
#: The built library's path inside the package (netguard.PACKAGED finds it there).
INTERPOSER_FILE = os.path.join("tfdist", "backends", "loopback-bind.so")


class BuildInterposer(build_ext):
    """build_ext that builds the interposer as a plain shared library under its own name."""

    def get_ext_filename(self, fullname: str) -> str:
        if fullname == INTERPOSER:
            return INTERPOSER_FILE
        if fullname == INTERPOSER.rpartition(".")[2]:  # get_ext_fullpath asks by the last name
            return os.path.basename(INTERPOSER_FILE)
        return str(super().get_ext_filename(fullname))

    def build_extension(self, ext: Extension) -> None:
        if ext.name != INTERPOSER:
            super().build_extension(ext)
            return
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        compiler = (os.environ.get("CC") or "cc").split()  # as netguard.find_compiler: $CC, else cc
        # a failure is a DistutilsExecError: for an optional extension, a warning, not a failed install
        self.spawn([*compiler, "-shared", "-fPIC", "-O2", "-o", out, *ext.sources, "-ldl"])


#: Optional: an install without a C compiler succeeds (with a warning) and builds on first use.
EXTENSION = Extension(INTERPOSER, sources=["src/tfdist/backends/loopback_bind.c"], optional=True)

if __name__ == "__main__":  # as pip's build backend runs it (a test loads the class alone)
    setup(ext_modules=[EXTENSION], cmdclass={"build_ext": BuildInterposer})

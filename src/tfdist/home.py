"""Where tfdist keeps one user's state, and who that user is.

``$TFDIST_HOME`` (default ``~/.tfdist``) holds the job store's SQLite file, the cached job
environments (:mod:`tfdist.pyenv`) and the built bind interposer
(:mod:`tfdist.backends.netguard`). It sits below every package that keeps something there,
so none of them reaches into another for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HOME_ENV = "TFDIST_HOME"


def home(environ: Mapping[str, str] | None = None) -> Path:
    """``$TFDIST_HOME`` of ``environ`` (default: this process's), else ``~/.tfdist``. Blank
    is unset, as ``TFDIST_STORE`` is (``TFDIST_HOME=' '`` made a directory named by a space
    in the current directory, a store apart from every other)."""
    given = (os.environ if environ is None else environ).get(HOME_ENV, "")
    return Path(given if given.strip() else Path.home() / ".tfdist").expanduser()


def current_user() -> str:
    """Who runs this tfdist: the name a team's history shows for the jobs it records."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry (a container): the number, said as such
        return f"uid {os.getuid()}"

"""The stdin watchdog: how a small helper process learns that the tfdist process it serves ended.

tfdist's helpers that clean up after it (the task guardian :mod:`tfdist.node.guardian`, the
YARN reaper :mod:`tfdist.backends.yarn.reaper`, the Kubernetes reaper
:mod:`tfdist.backends.k8s.reaper`) each hold the read end of a pipe whose write end only
their owner has. The owner writes one word a line; ``exit`` says it cleaned up itself. When
the owner dies, however it dies (SIGKILL included), the kernel closes its end and the
helper reads end-of-file: then, and only then, the helper does its work. Nothing to poll,
no pid that could be reused.

Standard library only and free of tfdist imports, and whole as a text: the guardian's
program (run with ``python -c`` where tfdist may not be installed) begins with this module's
source (so its ``__future__`` import stays first).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterable

TYPE_CHECKING = False  # typing's own costs the guardian's start-up an import
if TYPE_CHECKING:
    import subprocess

#: The word that says the owner ended cleanly: the helper exits without doing anything.
EXIT = "exit"


def watch(on_word: Callable[[str], object], stream: Iterable[str] | None = None) -> bool:
    """Hand each line's word (stripped) to ``on_word`` until the owner says :data:`EXIT`
    (returns True: nothing to do) or the pipe reaches end-of-file (returns False: the owner
    died). SIGINT and SIGTERM are ignored first: a Ctrl-C at tfdist's terminal reaches its
    whole foreground group, and the helper's work is exactly for when tfdist is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in sys.stdin if stream is None else stream:
        word = line.strip()
        if word == EXIT:
            return True
        on_word(word)
    return False


def dismiss(proc: subprocess.Popen[str], *, clean: bool = True, wait: bool = True,
            kill: bool = False) -> None:
    """The owner's side: end a helper started with a pipe on its stdin. ``clean``: say
    :data:`EXIT` first (the owner cleaned up itself; without it the helper does its work as
    if the owner had died); ``wait``: up to 5 s for the helper to exit, then, with ``kill``,
    SIGKILL it."""
    try:
        if proc.stdin is not None:
            if clean:
                proc.stdin.write(EXIT + "\n")
            proc.stdin.close()
    except (OSError, ValueError):
        pass
    if not wait:
        return
    try:
        proc.wait(timeout=5)
    except Exception:  # subprocess.TimeoutExpired: subprocess is not imported in the guardian
        if not kill:
            return
        proc.kill()
        proc.wait()

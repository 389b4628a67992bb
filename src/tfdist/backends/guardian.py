"""Kill a job's process groups if tfdist dies without cleaning up.

Run as a tiny separate process (``python -I -S guardian.py``): it reads lines from stdin,
``+PGID`` when a task starts, ``-PGID`` when tfdist has reaped it, and ``exit`` when tfdist
shut down cleanly. If stdin reaches end-of-file without ``exit`` (tfdist was SIGKILLed, or
crashed), it SIGKILLs every process group it still knows. PR_SET_PDEATHSIG on each task only
reaches the task itself; this also reaches whatever the task started in its group.
Stdlib only, no imports of tfdist: it must start in milliseconds.
"""

import contextlib
import os
import signal
import sys


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    groups = set()
    for line in sys.stdin:
        word = line.strip()
        if word == "exit":
            return
        if word[:1] == "+":
            groups.add(int(word[1:]))
        elif word[:1] == "-":
            groups.discard(int(word[1:]))
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    main()

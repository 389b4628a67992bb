"""Text a task wrote (a log line, a root cause, a reason, a progress value), made safe to
show: a terminal would obey its escapes (clear the screen, set the window title, write the
clipboard with OSC 52), and control characters garble a page or a table. One source for
the command line (:mod:`tfdist.cli`) and the dashboard (:mod:`tfdist.ui.text`); standard
library only."""

from __future__ import annotations

import re

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), and two-character escapes.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
                      r"|\x1b[@-_]|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0, DEL and C1


def printable(text: str) -> str:
    """``text`` without terminal escapes, other control characters shown as ``\\xNN``
    (tabs and newlines kept)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", _ESCAPES.sub("", text))

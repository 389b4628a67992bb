"""Text from outside made safe to show: a terminal would obey its escapes (clear the screen,
set the window title, write the clipboard with OSC 52), and control characters garble a
line, a page or a table. Two kinds, two functions: what a task wrote (a log line, a root
cause, a progress value: :func:`printable`, for the command line and the dashboard) keeps
its lines and loses its escapes; tfdist's own messages, which may quote what the user gave
(:func:`one_line`, for every error and warning), show every control character escaped so
that the value stays readable. Standard library only."""

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


#: The longest message printed whole; a longer one (it quotes a huge value) keeps its start
#: (the field) and its end (what to do), cut in the middle.
MAX_MESSAGE = 1000
#: C0 and C1 control characters and the Unicode line separators, as Python escapes them.
_ESCAPED = {c: repr(chr(c))[1:-1] for c in (*range(32), *range(127, 160), 0x2028, 0x2029)}


def one_line(message: str) -> str:
    """``message`` as one line of a terminal: a newline or an escape sequence in it (from a job
    file's value, a path, a flag) is shown escaped (``\\n``, ``\\x1b``), never acted on, and a
    message longer than :data:`MAX_MESSAGE` is cut in the middle."""
    text = message.translate(_ESCAPED)
    if len(text) > MAX_MESSAGE:
        text = f"{text[:MAX_MESSAGE - 300]} ... {text[-250:]}"
    return text

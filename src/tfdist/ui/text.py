"""Task output as a browser shows it: any bytes in, plain readable text out.

A task's log is whatever the program wrote: invalid UTF-8, terminal escapes (colours, cursor
moves, a title change), carriage returns of a progress bar, NUL bytes, a 10 MB line. The
page shows text (Jinja2 escapes it, the page's script sets ``textContent``), so markup is
never markup; this module makes it readable: bytes decoded with U+FFFD for what is not
UTF-8, escape sequences dropped, other control characters shown as ``\\xNN``, and a line cut
at :data:`MAX_LINE` characters saying how much more there was.
"""

from __future__ import annotations

from tfdist.safe_text import printable

#: Characters of one line shown at most; the rest is said as a count.
MAX_LINE = 4000


def clean(line: str, limit: int = MAX_LINE) -> str:
    """One line of output as text to show (see the module doc), cut at ``limit`` characters."""
    if "\r" in line:  # a redrawn progress bar: what the terminal would show last
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
    line = printable(line)
    if len(line) > limit:
        line = f"{line[:limit]} … [{len(line) - limit:,} more characters]"
    return line


def decode_lines(data: bytes) -> list[str]:
    """Bytes (whole lines) to cleaned lines."""
    text = data.decode("utf-8", errors="replace")
    return [clean(x) for x in text.split("\n")]

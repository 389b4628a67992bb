"""A run directory's files, read for the browser: never outside the run directory, never
through a symbolic link, never whole.

A task can write into its run directory, so it could put a link where its log is
(``logs/worker-0.log -> /etc/shadow``), make ``logs`` a link to elsewhere, or put a named
pipe there (opening it would wait for a writer). Every file is therefore opened one
component at a time from the run directory's own descriptor with ``O_NOFOLLOW`` and
``O_NONBLOCK`` (``openat``), and must be a regular file; the run directory must be one tfdist
made (:func:`tfdist.runs.is_run_dir`). That opening is :func:`tfdist.runs.open_in_run_dir`,
which ``tfdist logs`` uses too: one rule for both. Names come only from what the caller allows (a job's
own task names), and are checked again here for a path separator.

Logs can be gigabytes: they are read by byte ranges (:func:`read_range`, :func:`tail`) of at
most :data:`MAX_CHUNK` bytes, cut at line ends where the range allows, and searched in
chunks (:func:`search`) with a time budget, so the memory used does not grow with the log.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from tfdist.runs import OutsideRunDir as OutsideRunDir  # re-exported: the dashboard reads through them
from tfdist.runs import open_in_run_dir as open_in_run_dir
from tfdist.ui.text import clean, decode_lines

#: Bytes one range read returns at most.
MAX_CHUNK = 256 * 1024
#: The default view of a log: its last this many bytes.
TAIL_BYTES = 64 * 1024
#: A search stops after this many matches, or this many seconds (and says how far it read).
MAX_MATCHES = 200
SEARCH_SECONDS = 5.0
#: Small files shown whole (job.yaml) are refused above this size.
MAX_SMALL_FILE = 1 << 20


@dataclass
class Chunk:
    """Lines of a byte range ``[start, end)`` of a file of ``size`` bytes. ``cut_before`` /
    ``cut_after``: the range starts / ends inside a line (a line longer than a chunk)."""

    start: int
    end: int
    size: int
    lines: list[str] = field(default_factory=list)
    cut_before: bool = False
    cut_after: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"start": self.start, "end": self.end, "size": self.size, "lines": self.lines,
                "cut_before": self.cut_before, "cut_after": self.cut_after}


def read_range(fd: int, start: int, length: int, *, whole_lines: bool = True) -> Chunk:
    """Up to ``length`` (at most :data:`MAX_CHUNK`) bytes from ``start``, trimmed to whole
    lines when the range holds a line end (else the piece of the long line, marked cut)."""
    size = os.fstat(fd).st_size
    start = max(0, min(start, size))
    length = max(0, min(length, MAX_CHUNK, size - start))
    data = os.pread(fd, length, start)
    end = start + len(data)
    cut_before = start > 0 and os.pread(fd, 1, start - 1) != b"\n"
    cut_after = False
    if whole_lines and data:
        if cut_before:
            nl = data.find(b"\n")
            if 0 <= nl < len(data) - 1:
                start, data, cut_before = start + nl + 1, data[nl + 1:], False
        if end < size and not data.endswith(b"\n"):
            nl = data.rfind(b"\n")
            if nl >= 0:
                end, data = start + nl + 1, data[: nl + 1]
            else:
                cut_after = True
    if data.endswith(b"\n"):
        data = data[:-1]
    elif end == size and data:
        cut_after = False  # the last line, still being written
    lines = decode_lines(data) if data else []
    return Chunk(start, end, size, lines, cut_before, cut_after)


def tail(fd: int, length: int = TAIL_BYTES) -> Chunk:
    """The last ``length`` bytes, from the first whole line in them."""
    size = os.fstat(fd).st_size
    return read_range(fd, max(0, size - length), length)


def read_small(fd: int) -> str:
    """A small text file whole (job.yaml); refused above :data:`MAX_SMALL_FILE`."""
    size = os.fstat(fd).st_size
    if size > MAX_SMALL_FILE:
        raise OutsideRunDir(f"the file is {size:,} bytes (shown up to {MAX_SMALL_FILE:,})")
    return os.pread(fd, size, 0).decode("utf-8", errors="replace")


@dataclass
class Matches:
    """Where ``needle`` occurs: (byte offset of the line, the line), and how far was read."""

    hits: list[tuple[int, str]]
    searched: int
    size: int
    complete: bool


def search(fd: int, needle: str, *, limit: int = MAX_MATCHES,
           seconds: float = SEARCH_SECONDS) -> Matches:
    """Lines containing ``needle`` (case-insensitive), read chunk by chunk: memory is one
    chunk and the matches, whatever the size of the log."""
    size = os.fstat(fd).st_size
    key = needle.encode("utf-8", errors="replace").lower()
    hits: list[tuple[int, str]] = []
    deadline = time.monotonic() + seconds
    pos, carry = 0, b""
    while pos < size and len(hits) < limit and time.monotonic() < deadline:
        data = os.pread(fd, MAX_CHUNK, pos)
        if not data:
            break
        buf = carry + data
        base = pos - len(carry)
        pos += len(data)
        last_nl = buf.rfind(b"\n")
        if last_nl < 0 and len(buf) < 4 * MAX_CHUNK and pos < size:
            carry = buf  # a long line: keep reading it (bounded)
            continue
        upto = last_nl + 1 if last_nl >= 0 and pos < size else len(buf)
        body, carry = buf[:upto], buf[upto:]
        low = body.lower()
        at = low.find(key)
        while at >= 0 and len(hits) < limit:
            begin = body.rfind(b"\n", 0, at) + 1
            stop = body.find(b"\n", at)
            stop = len(body) if stop < 0 else stop
            hits.append((base + begin, clean(body[begin:stop].decode("utf-8", errors="replace"))))
            at = low.find(key, stop)
    searched = min(pos, size)
    return Matches(hits, searched, size, searched >= size and len(hits) < limit)

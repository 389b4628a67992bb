"""Allocate and touch MB megabytes, then report it: a task that outgrows its memory limit."""
import sys

size = int(sys.argv[1])
block = b"\1" * (size << 20)  # every page written, so every page is charged
print(f"allocated {size} MB", flush=True)

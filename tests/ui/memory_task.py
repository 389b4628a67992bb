"""A task that holds argv[1] MiB of memory (touched, so resident) and keeps one core busy
until ``<run dir>/go`` exists (at most two minutes): resource charts to watch."""
import os
import sys
import time

held = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(held), 4096):
    held[i] = 1
print("holding", sys.argv[1], "MiB", flush=True)
go = os.path.join(os.environ["TFDIST_RUN_DIR"], "go")
end = time.monotonic() + 120
while not os.path.exists(go) and time.monotonic() < end:
    sum(range(20000))

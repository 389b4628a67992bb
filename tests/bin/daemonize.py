"""Start a grandchild that leaves the process group (double fork + setsid), as daemons do,
print its pid and exit 0 at once. ``keep`` keeps the daemon's stdout on our pipe (it then
holds the task's output open); ``close`` closes it, as a proper daemon does."""

import os
import sys
import time

mode = sys.argv[1]
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        if mode == "close":
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
        os.write(w, f"{os.getpid()}\n".encode())
        while True:
            time.sleep(1)
    os._exit(0)
os.wait()
print("daemon pid", os.read(r, 64).decode().strip(), flush=True)

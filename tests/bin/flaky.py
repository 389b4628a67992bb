"""Fail (exit code argv[1], default 1) on the first attempt of the task named argv[2]; succeed
after. Prints its restart count so tests can check TFDIST_RESTART_COUNT.

On the first attempt the other tasks wait until they are stopped (as all-reduce peers wait
for a lost member), so the failure is always seen before any success, however the
processes are scheduled."""
import os
import sys
import time

code = int(sys.argv[1]) if len(sys.argv) > 1 else 1
who = sys.argv[2] if len(sys.argv) > 2 else "worker-0"
me = os.environ["TFDIST_TASK"]
count = int(os.environ["TFDIST_RESTART_COUNT"])
print(f"{me} attempt restart_count={count}", flush=True)
if count == 0:
    if me == who:
        time.sleep(0.2)
        sys.exit(code)
    time.sleep(120)
time.sleep(0.5)

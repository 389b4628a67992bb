"""First attempt: print our pid and sleep (a test kills us); later attempts: exit 0."""
import os
import sys
import time

print(f"{os.environ['TFDIST_TASK']} pid {os.getpid()} restart {os.environ['TFDIST_RESTART_COUNT']}",
      flush=True)
if os.environ["TFDIST_RESTART_COUNT"] == "0":
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 120)
    sys.exit(3)


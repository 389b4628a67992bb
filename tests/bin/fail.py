"""Exit with the code given as argv[1] (default 3) after a few lines of output;
only on the task named by argv[2] (default: every task). Others sleep then exit 0."""
import os
import sys
import time

code = int(sys.argv[1]) if len(sys.argv) > 1 else 3
who = sys.argv[2] if len(sys.argv) > 2 else None
me = os.environ.get("TFDIST_TASK")
if who is None or who == me:
    for i in range(25):
        print(f"{me} line {i}", flush=True)
    print("boom: simulated failure", flush=True)
    sys.exit(code)
time.sleep(float(os.environ.get("SLEEP", "30")))

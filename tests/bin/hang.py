"""Sleep forever (or for argv[1] seconds), printing a line first; spawns a grandchild
that sleeps too, so tests can check that tfdist kills whole process groups."""
import os
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
print(f"{os.environ.get('TFDIST_TASK')} pid {os.getpid()} child {child.pid}", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 3600)

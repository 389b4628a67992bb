"""A PSS-shaped job without TensorFlow: ps and workers print their pid and wait to be
stopped; the chief succeeds once worker-1 has been restarted (its log says "restart 1")."""
import os
import sys
import time
from pathlib import Path

task = os.environ["TFDIST_TASK"]
print(f"{task} pid {os.getpid()} restart {os.environ['TFDIST_RESTART_COUNT']}", flush=True)
if not task.startswith("chief"):
    time.sleep(3600)
log = Path(os.environ["TFDIST_RUN_DIR"]) / "logs" / "worker-1.log"
deadline = time.monotonic() + 240
while time.monotonic() < deadline:
    if log.exists() and "worker-1 pid" in log.read_text() and "restart 1" in log.read_text():
        sys.exit(0)
    time.sleep(0.2)
sys.exit(4)

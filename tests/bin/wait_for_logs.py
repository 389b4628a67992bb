"""Exit 0 once each named task's log shows `text` `count` times (120 s at most, then 1).

argv: text, count, task names. Lets a test's chief end when its peers reached a state,
instead of after a sleep that a slow machine may outlast.
"""
import os
import sys
import time
from pathlib import Path

text, count, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
logs = [Path(os.environ["TFDIST_RUN_DIR"], "logs", f"{name}.log") for name in names]
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if all(log.exists() and log.read_text().count(text) >= count for log in logs):
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)

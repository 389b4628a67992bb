"""On SIGTERM, 'save' for SAVE_SECONDS (default 2) and exit 0: a task using its grace period
to write a checkpoint. It leaves ``<task>.sigterm`` and then ``<task>.saved`` in the run
directory (files, not log lines: they are what a test reads). A second stop that cut the
grace short would kill it before ``saved``."""
import os
import signal
import sys
import time
from pathlib import Path

MARK = Path(os.environ["TFDIST_RUN_DIR"], os.environ["TFDIST_TASK"])


def save(signum, frame):
    MARK.with_suffix(".sigterm").touch()
    time.sleep(float(os.environ.get("SAVE_SECONDS", "2")))
    MARK.with_suffix(".saved").touch()
    sys.exit(0)


signal.signal(signal.SIGTERM, save)
print("ready", flush=True)
while True:
    time.sleep(1)

"""Redraw one status line with carriage returns (no newline) for N seconds, like a progress
bar, then print a whole line and exit 0."""

import sys
import time

seconds = float(sys.argv[1])
end = time.monotonic() + seconds
step = 0
while time.monotonic() < end:
    step += 1
    sys.stdout.write(f"\rstep {step}")
    sys.stdout.flush()
    time.sleep(0.2)
sys.stdout.write("\ndone\n")

"""Ignore SIGTERM and sleep: tfdist must fall back to SIGKILL after the grace period."""
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
time.sleep(3600)

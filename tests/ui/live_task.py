"""Reports progress every 0.3 s (loss falling, worker-1 at a third of the rate: the
straggler) and prints a log line each time, until stopped; at most ~3 minutes."""
import json
import os
import time

task = os.environ.get("TFDIST_TASK", "worker-0")
slow = 3.0 if task == "worker-1" else 1.0
for step in range(1, 600):
    time.sleep(0.3)
    print("TFDIST_PROGRESS " + json.dumps({"step": step * 10, "loss": round(2.0 / step, 4),
                                            "steps_per_sec": round(33 / slow, 2),
                                            "examples_per_sec": round(1000 / slow, 1)}), flush=True)
    print(f"{task} step {step}", flush=True)

"""A task that reports progress like a Keras job, without TensorFlow (fast).

argv: epochs, seconds per epoch. worker-1 reports a third of the others' rate, so it is the
straggler.
"""
import json
import os
import sys
import time

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
task = os.environ.get("TFDIST_TASK", "worker-0")
slow = 3.0 if task == "worker-1" else 1.0
steps = 10
for epoch in range(1, epochs + 1):
    time.sleep(pause)
    report = {"epoch": epoch, "epochs": epochs, "step": epoch * steps, "loss": round(2.0 / epoch, 4),
              "metrics": {"accuracy": round(1 - 0.5 / epoch, 4)},
              "examples_per_sec": round(640 / pause / slow, 1),
              "steps_per_sec": round(steps / pause / slow, 2),
              "final": False}
    print("TFDIST_PROGRESS " + json.dumps(report), flush=True)
    print(f"{task} epoch {epoch} done", flush=True)
print("TFDIST_PROGRESS " + json.dumps({"epoch": epochs, "epochs": epochs, "step": epochs * steps,
                                        "final": True, "metrics": {"accuracy": 0.9}}), flush=True)

"""A task that reports progress like a Keras job, without TensorFlow (fast).

argv: epochs, seconds per epoch. worker-1 reports a third of the others' rate, so it is the
straggler. The tasks start and end together (files in the run directory), so the straggler
is always compared with peers that are still running, however slowly each one started.
"""
import json
import os
import sys
import time
from pathlib import Path


def together(stage: str) -> None:
    """Wait (60 s at most) until every task of the cluster reached ``stage``."""
    run_dir = os.environ.get("TFDIST_RUN_DIR")
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    if not run_dir or not cluster:
        return
    names = [f"{role}-{i}" for role, hosts in cluster.items() for i in range(len(hosts))]
    Path(run_dir, f"{stage}-{os.environ['TFDIST_TASK']}").touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(Path(run_dir, f"{stage}-{n}").exists() for n in names):
        time.sleep(0.05)


epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
task = os.environ.get("TFDIST_TASK", "worker-0")
slow = 3.0 if task == "worker-1" else 1.0
steps = 10
together("ready")
for epoch in range(1, epochs + 1):
    time.sleep(pause)
    report = {"epoch": epoch, "epochs": epochs, "step": epoch * steps, "loss": round(2.0 / epoch, 4),
              "metrics": {"accuracy": round(1 - 0.5 / epoch, 4)},
              "examples_per_sec": round(640 / pause / slow, 1),
              "steps_per_sec": round(steps / pause / slow, 2),
              "final": False}
    print("TFDIST_PROGRESS " + json.dumps(report), flush=True)
    print(f"{task} epoch {epoch} done", flush=True)
together("done")
print("TFDIST_PROGRESS " + json.dumps({"epoch": epochs, "epochs": epochs, "step": epochs * steps,
                                        "final": True, "metrics": {"accuracy": 0.9}}), flush=True)

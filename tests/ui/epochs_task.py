"""Reports ``EPOCHS`` epochs (argv[1]) quickly, loss falling and accuracy rising by
``argv[2]`` per epoch, then exits 0: a finished run with curves to compare."""
import json
import sys
import time

epochs, gain = int(sys.argv[1]), float(sys.argv[2])
for epoch in range(1, epochs + 1):
    time.sleep(0.05)
    print("TFDIST_PROGRESS " + json.dumps({"epoch": epoch, "epochs": epochs, "step": epoch * 10,
                                            "loss": round(1.0 / (epoch * gain), 4),
                                            "metrics": {"accuracy": round(min(1.0, 0.1 * epoch * gain), 4)}}),
          flush=True)

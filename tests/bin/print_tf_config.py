"""Print this task's tfdist environment as one JSON line, then exit 0."""
import json
import os

keys = ["TF_CONFIG", "TFDIST_JOB_NAME", "TFDIST_TASK", "TFDIST_RESTART_COUNT", "TFDIST_RUN_DIR",
        "TF_USE_LEGACY_KERAS", "CUDA_VISIBLE_DEVICES", "TFDIST_STRATEGY"]
print("ENV " + json.dumps({k: os.environ.get(k) for k in keys}), flush=True)

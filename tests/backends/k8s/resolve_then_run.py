"""Run in the real node's pods by the rendered-forms tests (test_real_pods.py), as
``python resolve_then_run.py SCRIPT ARGS``: waits until every name in TF_CONFIG resolves
inside the pod (retrying while the other pods start), prints what each resolved to as one
``peers {...}`` JSON line, then runs SCRIPT as ``__main__`` as ``python SCRIPT ARGS`` would.

A file, not ``python -c``: the chief's and workers' command is then ``python SCRIPT ...``,
the shape that tfdist runs through its leave program in every form, so the forms' runs show
that program working in pods too. The checkout is mounted in the pods at its own path
(kube/image.py)."""

import json
import os
import runpy
import socket
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
me = f"{config['task']['type']}-{config['task']['index']}"
resolved, deadline = {}, time.time() + 180
for role, addresses in config["cluster"].items():
    for index, address in enumerate(addresses):
        while True:
            try:
                resolved[f"{role}-{index}"] = socket.gethostbyname(address.rsplit(":", 1)[0])
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
print("peers " + json.dumps({"me": me, "resolved": resolved}), flush=True)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")

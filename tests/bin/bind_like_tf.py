"""Bind and listen on this task's TF_CONFIG port as TensorFlow's gRPC server does, then exit 0:
the wildcard address, with ``SO_REUSEPORT`` only where ``TF_GRPC_REUSE_PORT=1`` asks for it
(TensorFlow's grpc_server_lib). Tests of port handling use it instead of a real server: the
property is about the port tfdist hands out, and a TensorFlow import costs 4-5 CPU-seconds."""
import json
import os
import socket

cfg = json.loads(os.environ["TF_CONFIG"])
task = cfg["task"]
port = int(cfg["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
if os.environ.get("TF_GRPC_REUSE_PORT") == "1":
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
try:
    sock.bind(("0.0.0.0", port))
    sock.listen()
except OSError as err:  # EADDRINUSE's words, as gRPC reports them
    raise SystemExit(f"bind 0.0.0.0:{port}: {err}") from None
print("serving", f"grpc://localhost:{port}", flush=True)

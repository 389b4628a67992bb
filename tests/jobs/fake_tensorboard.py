"""Stands in for TensorBoard where it is not installed: parses --logdir/--host/--port,
serves the log directory's listing over HTTP and prints the line TensorBoard prints."""
import argparse
import functools
import http.server

parser = argparse.ArgumentParser()
parser.add_argument("--logdir")
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=0)
args = parser.parse_args()
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=args.logdir)
server = http.server.HTTPServer((args.host, args.port), handler)
print(f"TensorBoard 0.0 at http://{args.host}:{server.server_port}/ (Press CTRL+C to quit)", flush=True)
server.serve_forever()

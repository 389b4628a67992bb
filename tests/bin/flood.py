"""Print N lines of about 1 KB each, then exit 0: fills a small disk with log output."""

import sys

for i in range(int(sys.argv[1])):
    print(f"line {i} " + "x" * 1000, flush=True)
print("flood done", flush=True)

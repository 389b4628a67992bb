"""Print the version of a package as this task sees it, and that tfdist.runtime imports.

Usage: print_version.py PACKAGE [BARRIER_DIR ME OTHER]: with a barrier, touch BARRIER_DIR/ME
and wait (up to 120 s) for BARRIER_DIR/OTHER, so two jobs prove they ran at the same time.
"""

import importlib.metadata
import sys
import time
from pathlib import Path

from tfdist import runtime  # noqa: F401  (must import in a job's own environment)

package = sys.argv[1]
module = __import__(package)
print(f"VERSION {package} {importlib.metadata.version(package)} {module.__file__}", flush=True)
if len(sys.argv) == 5:
    barrier, me, other = Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    (barrier / me).touch()
    deadline = time.monotonic() + 120
    while not (barrier / other).exists():
        if time.monotonic() > deadline:
            print(f"never saw {other} running", flush=True)
            sys.exit(3)
        time.sleep(0.1)
    print(f"saw {other} running", flush=True)

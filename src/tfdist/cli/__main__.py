"""``python -m tfdist.cli``: what detached jobs and the tests run."""

import sys

from tfdist.cli.main import main

sys.exit(main())

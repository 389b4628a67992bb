"""The ``tfdist`` command line (entry point :func:`tfdist.cli.main.main`)."""

from tfdist.cli.main import main

__all__ = ["main"]

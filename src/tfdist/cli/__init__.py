"""The ``tfdist`` command line (entry point :func:`tfdist.cli.main.entry`; ``python -m tfdist.cli``
runs :func:`tfdist.cli.main.main`). Nothing is imported here: a command imports what it needs."""

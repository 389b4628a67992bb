"""``tfdist ui [--host 127.0.0.1] [--port N]``: the dashboard (:mod:`tfdist.ui`)."""

from __future__ import annotations

import argparse


def cmd_ui(args: argparse.Namespace, command: list[str]) -> int:
    from tfdist.ui.server import serve

    return serve(args.host, args.port)

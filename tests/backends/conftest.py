"""Fixtures shared by the backend tests."""

from __future__ import annotations

import os
import sys

import pytest

from tfdist.backends import netguard


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The netguard interposer (loopback binds, parent-death signal): the one built when tfdist
    was installed, else one built on first use in a fresh home."""
    if not sys.platform.startswith("linux") or (
            not netguard.PACKAGED.is_file() and netguard.find_compiler(os.environ)[0] is None):
        pytest.skip("the interposer is built only on Linux with a C compiler (none here, none at install)")
    guard = netguard.prepare({}, environ={}, home=tmp_path_factory.mktemp("home"))
    assert guard.library and guard.warning is None, guard.warning
    return guard.library

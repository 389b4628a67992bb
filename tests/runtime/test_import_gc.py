"""tfdist.node.import_gc: a named package's import runs with the cyclic collector paused and
freezes what exists once it has run; nothing else changes. Each case runs in a fresh
interpreter of its own (a freeze would otherwise stay in the test's process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

PACKAGES = {
    # records whether the collector ran during its own import
    "light": "import gc\nSEEN = gc.isenabled()\nJUNK = [[] for _ in range(1000)]\n",
    # imports another named package: the outer pause covers it
    "outer": "import gc\nimport light\nSEEN = gc.isenabled()\n",
    "broken": "raise ImportError('broken on purpose')\n",
}


def _run(tmp_path: Path, code: str, **env: str) -> list[str]:
    for name, text in PACKAGES.items():
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "__init__.py").write_text(text)
    prelude = textwrap.dedent(f"""
        import gc, sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(SRC)!r}]
        from tfdist.node import import_gc
    """)
    out = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_a_named_package_runs_paused_then_is_frozen_and_its_loader_is_as_it_was(tmp_path):
    out = _run(tmp_path, """
        sys.meta_path.insert(0, import_gc.FrozenImport({"light"}))
        import light
        print(light.SEEN, gc.isenabled(), gc.get_freeze_count() >= 1000,
              "exec_module" in vars(light.__spec__.loader), type(light.__loader__).__name__)
    """)
    assert out == ["False", "True", "True", "False", "SourceFileLoader"]


def test_another_package_is_left_alone(tmp_path):
    out = _run(tmp_path, """
        sys.meta_path.insert(0, import_gc.FrozenImport({"outer"}))
        import light
        print(light.SEEN, gc.get_freeze_count())
    """)
    assert out == ["True", "0"]


def test_a_nested_named_import_stays_paused_until_the_outer_one_ends(tmp_path):
    out = _run(tmp_path, """
        sys.meta_path.insert(0, import_gc.FrozenImport({"light", "outer"}))
        import outer
        print(outer.SEEN, sys.modules["light"].SEEN, gc.isenabled(), gc.get_freeze_count() > 0)
    """)
    assert out == ["False", "False", "True", "True"]


def test_a_failed_import_resumes_the_collector_freezes_nothing_and_can_be_retried(tmp_path):
    out = _run(tmp_path, """
        sys.meta_path.insert(0, import_gc.FrozenImport({"broken"}))
        for _ in range(2):
            try:
                import broken
            except ImportError as err:
                print(str(err).replace(" ", "_"), gc.isenabled(), gc.get_freeze_count())
    """)
    assert out == ["broken_on_purpose", "True", "0"] * 2


def test_a_script_that_turned_the_collector_off_keeps_it_off(tmp_path):
    out = _run(tmp_path, """
        sys.meta_path.insert(0, import_gc.FrozenImport({"light"}))
        gc.disable()
        import light
        print(gc.isenabled(), gc.get_freeze_count())
    """)
    assert out == ["False", "0"]


@pytest.mark.parametrize(("switch", "finders"), [("1", "1"), ("0", "0")])
def test_install_once_and_the_switch_turns_it_off(tmp_path, switch, finders):
    out = _run(tmp_path, """
        import_gc.install()
        import tfdist.runtime  # installs it too
        print(sum(isinstance(f, import_gc.FrozenImport) for f in sys.meta_path))
    """, TFDIST_FREEZE_IMPORTS=switch)
    assert out == [finders]

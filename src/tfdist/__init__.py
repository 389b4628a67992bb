"""tfdist: run distributed TensorFlow training from one job spec.

``import tfdist`` is light (no TensorFlow, Ray, Kubernetes, not even the job spec): the Python
API (:func:`run`, :func:`submit`, :func:`handle`, :class:`JobHandle`) is loaded from
:mod:`tfdist.api` on first use. Training scripts import :mod:`tfdist.runtime`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobHandle", "handle", "run", "submit"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tfdist import api

        return getattr(api, name)
    raise AttributeError(f"module 'tfdist' has no attribute {name!r}")

"""tfdist."""

from tfdist.jobs import JobHandle, submit

__all__ = ["JobHandle", "submit"]

"""Label keys and values as Kubernetes takes them, checked once for every use: a job's own
``labels:`` (``tfdist submit --label team=vision``, shown and filtered in ``tfdist list`` and
the dashboard) and a Kubernetes job's ``kubernetes.labels`` and ``node_selector``.

Keeping job labels to Kubernetes' rules means the same text is valid everywhere it may go
(a pod label, a SQL filter, a page), and no label holds a quote, a space or a wildcard.
"""

from __future__ import annotations

import re

MAX_NAME = 63
MAX_PREFIX = 253
_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
#: A key: an optional DNS-subdomain prefix (at most 253) and '/', then a name (at most 63).
_KEY = re.compile(r"(?:([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/)?"
                  r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)")
KEY_RULE = ("a name of at most 63 letters, digits, '-', '_' or '.', after an optional DNS prefix "
            "and '/', e.g. example.com/team")
VALUE_RULE = "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"


def key_ok(key: str) -> bool:
    found = _KEY.fullmatch(key) if isinstance(key, str) else None
    return found is not None and len(found[1] or "") <= MAX_PREFIX and len(found[5]) <= MAX_NAME


def value_ok(value: str) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME and bool(_VALUE.fullmatch(value))


def problem(where: str, key: str, value: str) -> str | None:
    """What is wrong with one label (a line naming ``where``), or None."""
    if not key_ok(key):
        return f"{where}: {str(key)[:80]!r} is not a Kubernetes label key ({KEY_RULE})"
    if not value_ok(value):
        return f"{where}.{key}: {str(value)[:80]!r} is not a Kubernetes label value ({VALUE_RULE})"
    return None


def parse(text: str, flag: str = "--label") -> tuple[str, str]:
    """``KEY=VALUE`` from the command line or a filter; ValueError names the flag."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{flag}: {text[:80]!r} is not KEY=VALUE; give e.g. {flag} team=vision")
    said = problem(flag, key, value)
    if said:
        raise ValueError(said)
    return key, value

"""What Kubernetes itself makes of a manifest's values, for reading one (:mod:`.tfjob`).

Typed access that names the field in every error (:class:`Reader`), the kubelet's
``$(VAR)`` expansion (:func:`expand`), CPU quantities (:func:`parse_cpu`) and a container's
``resources`` as tfdist's: Kubernetes' rules, apart from what a TFJob adds to them.
"""

from __future__ import annotations

from typing import Any

from tfdist.errors import SpecError


class Reader:
    """Typed access to a manifest that names the field in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> SpecError:
        return SpecError(f"{self.source}: {path}: {message}")

    def get(self, obj: dict[str, Any], key: str, kind: type, path: str, default: Any = None) -> Any:
        value = obj.get(key, default)
        if value is None:
            return default
        if kind is int and isinstance(value, bool) or not isinstance(value, kind):
            raise self.fail(
                f"{path}.{key}" if path else key,
                f"expected {_kind_name(kind)}, got {_kind_of(value)}",
            )
        return value


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}" + ("; quote it" if not isinstance(value, int) else "")
    names: dict[type, str] = {dict: "a mapping", list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _kind_name(kind: type) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "a whole number"}.get(
        kind, kind.__name__
    )


def expand(value: str, env: dict[str, str]) -> str:
    """What the kubelet makes of a string: ``$(VAR)`` of a variable defined earlier in the
    container becomes its value, ``$$`` becomes ``$``, anything else stays (a port of
    Kubernetes' third_party/forked/golang/expansion). Locally the task must see the same."""
    out = []
    i = 0
    while i < len(value):
        char = value[i]
        if char == "$" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = value.find(")", i + 2)
                if close != -1:
                    name = value[i + 2 : close]
                    out.append(env.get(name, f"$({name})"))
                    i = close + 1
                    continue
        out.append(char)
        i += 1
    return "".join(out)


def parse_cpu(value: Any) -> float:
    """A Kubernetes CPU quantity (``500m``, ``2``, ``1.5``) as a number of CPUs."""
    text = str(value).strip()
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    return float(text)


def resources_of(r: Reader, spec: dict[str, Any], path: str) -> dict[str, Any]:
    """A container's ``resources`` (requests, else limits) as a tfdist role's ``resources``."""
    requests = r.get(spec, "requests", dict, path, {})
    limits = r.get(spec, "limits", dict, path, {})
    found: dict[str, Any] = {}
    cpu = requests.get("cpu", limits.get("cpu"))
    if cpu is not None:
        try:
            found["cpus"] = parse_cpu(cpu)
        except ValueError:
            raise r.fail(f"{path}.cpu", f"not a CPU quantity: {cpu!r}") from None
    memory = limits.get("memory", requests.get("memory"))
    if memory is not None:
        found["memory"] = str(memory)
    gpus = limits.get("nvidia.com/gpu", requests.get("nvidia.com/gpu"))
    if gpus is not None:
        try:
            found["gpus"] = int(str(gpus))
        except ValueError:
            raise r.fail(f"{path}.nvidia.com/gpu", f"not a whole number: {gpus!r}") from None
    return found

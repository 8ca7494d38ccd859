"""Typed policy parameters, declared by each policy beside it as a frozen dataclass.

Every field is made by `param`: its default, the range it must lie in, whether it is a whole
number, what None means where None is allowed (the policy's own choice, or a feature off)
and a one-line doc. `PolicyParams.parse` checks a request's numbers against those
declarations, so a bad one is refused naming the policy, the parameter and what is allowed,
and `powertrip policies` prints the same declarations.

On the wire (SelectSitesRequest's `map<string, double>`) and in a run's config.yaml a
parameter is a number. None crosses as an absent key or as 0, the number every stored run
wrote for "auto" (0 lies outside the range of every parameter that takes None, so it cannot
mean anything else); `as_numbers` writes that stored form, so a run's config.yaml compares
equal to the runs stored before.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

#: the metadata key under which `param` stores a field's declaration
_KEY = "powertrip_param"


class PolicyError(ValueError):
    """A bad policy name or parameter; the message names it and what is allowed."""


def param_number(name: str, value: str | float | int) -> float:
    """A policy parameter's value as the number it crosses the wire as (SelectSitesRequest's
    `map<string, double>`); text that is not a number is refused, named."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: {value!r} is not a number")
    try:
        return float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not a number") from None


@dataclass(frozen=True)
class Bounds:
    """One parameter's declaration: what `param` was told, read back by `PolicyParams`."""

    doc: str
    whole: bool = False
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    #: what None means ("" where None is not allowed)
    none: str = ""

    def admits(self, value: float) -> bool:
        """Whether a finite number is in range (None is checked by the caller)."""
        if self.whole and not float(value).is_integer():
            return False
        if self.at_least is not None and value < self.at_least:
            return False
        if self.above is not None and value <= self.above:
            return False
        return self.at_most is None or value <= self.at_most

    def allowed(self) -> str:
        """The range in words, as an error message and `powertrip policies` say it."""
        low = (
            None
            if self.at_least is None and self.above is None
            else ("[", self.at_least)
            if self.at_least is not None
            else ("(", self.above)
        )
        if low is not None and self.at_most is not None:
            text = f"in {low[0]}{low[1]:g}, {self.at_most:g}]"
        elif low is not None:
            text = f"{'>=' if low[0] == '[' else '>'} {low[1]:g}"
        elif self.at_most is not None:
            text = f"<= {self.at_most:g}"
        else:
            text = "finite"
        if self.whole:
            text = "a whole number " + text
        return text + (f" (0 or unset: {self.none})" if self.none else "")


def param(default: float | None, doc: str, **bounds: Any) -> Any:
    """A policy parameter's dataclass field: its default and its `Bounds` (doc, whole,
    at_least, above, at_most, none)."""
    declared = Bounds(doc, **bounds)
    if declared.none and declared.admits(0.0):
        # 0 is how a stored run wrote None: it must not also be a value in range
        raise TypeError(f"a parameter that takes None must not admit 0 ({doc!r})")
    return dataclasses.field(default=default, metadata={_KEY: declared})


@dataclass(frozen=True)
class Spec:
    """A parameter as `powertrip policies` and the docs show it."""

    name: str
    kind: str  # "int" or "float"
    default: float | int | None
    bounds: Bounds

    @property
    def doc(self) -> str:
        return self.bounds.doc

    def default_text(self) -> str:
        return "unset" if self.default is None else f"{self.default:g}"

    def describe(self) -> str:
        """One line: name, type, default, the doc and what is allowed."""
        return (
            f"{self.name} ({self.kind}, default {self.default_text()}): {self.doc}; "
            f"{self.bounds.allowed()}"
        )


@dataclass(frozen=True)
class PolicyParams:
    """Base of every policy's parameters: subclasses declare frozen fields with `param`."""

    #: shown where a policy takes no parameters
    NONE: ClassVar[str] = "none"

    @classmethod
    def specs(cls) -> tuple[Spec, ...]:
        """Each parameter's declaration, in declaration order."""
        return tuple(
            Spec(f.name, "int" if f.metadata[_KEY].whole else "float", f.default, f.metadata[_KEY])
            for f in dataclasses.fields(cls)
        )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def parse(
        cls, policy: str, given: Mapping[str, float | int | None], base: Self | None = None
    ) -> Self:
        """`base` (default: the declared defaults) with `given` applied, each value checked:
        an unknown name, or a value that is not a number in its range, is a PolicyError
        naming the policy, the parameter and what is allowed. 0 for a parameter that takes
        None is None (the stored form)."""
        specs = {s.name: s for s in cls.specs()}
        unknown = sorted(set(given) - set(specs))
        if unknown:
            allowed = ", ".join(sorted(specs)) or cls.NONE
            raise PolicyError(
                f"policy {policy!r}: unknown parameter(s) {', '.join(unknown)}; allowed: {allowed}"
            )
        values = {name: _checked(policy, specs[name], value) for name, value in given.items()}
        return dataclasses.replace(base if base is not None else cls(), **values)

    def as_numbers(self) -> dict[str, float]:
        """Every parameter as the number a run writes and the wire carries: None as 0."""
        return {
            name: 0.0 if value is None else float(value)
            for name, value in dataclasses.asdict(self).items()
        }

    @classmethod
    def with_defaults(cls, **defaults: float | None) -> type[Self]:
        """These parameters with other defaults (an alias of a policy, or a test that moves
        a default), the declarations otherwise the same."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(defaults) - set(fields))
        if unknown:
            raise TypeError(f"{cls.__name__} has no parameter(s) {', '.join(unknown)}")
        namespace: dict[str, Any] = {
            "__annotations__": {name: fields[name].type for name in defaults},
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        }
        for name, value in defaults.items():
            namespace[name] = dataclasses.field(default=value, metadata=fields[name].metadata)
        return dataclass(frozen=True)(type(cls.__name__, (cls,), namespace))


def _checked(policy: str, spec: Spec, value: float | int | str | None) -> float | int | None:
    """One given value as its declared type, or a PolicyError saying what is allowed."""
    bounds = spec.bounds
    if value is None:
        if bounds.none:
            return None
        raise PolicyError(f"policy {policy!r}: {spec.name} must be {bounds.allowed()}, got none")
    try:
        number = param_number(spec.name, value)
    except ValueError as exc:
        raise PolicyError(f"policy {policy!r}: {exc}") from None
    if bounds.none and number == 0:
        return None  # the stored form of None
    if not math.isfinite(number) or not bounds.admits(number):
        raise PolicyError(
            f"policy {policy!r}: {spec.name} must be {bounds.allowed()}, got {number:g}"
        )
    return int(number) if bounds.whole else number

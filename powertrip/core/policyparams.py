"""Policy parameters that name a choice rather than a number.

Policy parameters cross the wire as `map<string, double>` (SelectSitesRequest.params), so a
named choice travels as its index in the list below. Users write the name
(`--param rule=feedback`, `policy_params: {rule: feedback}`); the CLI, the config loader
and the policy service all translate through this one table, so a name means the same thing
everywhere and an unknown one is refused with the allowed names.
"""

from __future__ import annotations

import math

#: parameter -> its allowed names; the first is the default (index 0)
CHOICES: dict[str, tuple[str, ...]] = {
    # powertrip's rule: "paper" (§3.3 and §4 as written, the default) or "feedback" (the
    # rule this project used before, kept for the ablation and its stored runs)
    "rule": ("paper", "feedback"),
    # rule=feedback's projected gain: "feedback" or "separable" (the rule before it: argmax
    # of g*log(1+k)/T(k)); the paper's rule ignores it
    "gain": ("feedback", "separable"),
}


def encode(name: str, value: str | float | int) -> float:
    """The wire number of a parameter value given as a name or as a number."""
    choices = CHOICES.get(name)
    if isinstance(value, str):
        text = value.strip()
        if choices is not None and text in choices:
            return float(choices.index(text))
        try:
            number = float(text)
        except ValueError:
            allowed = f"one of {', '.join(choices)}" if choices else "a number"
            raise ValueError(f"{name}: {value!r} is not {allowed}") from None
    else:
        number = float(value)
    if choices is not None and not (
        math.isfinite(number) and number.is_integer() and 0 <= number < len(choices)
    ):
        raise ValueError(f"{name}: {value!r} is not one of {', '.join(choices)}")
    return number


def decode(name: str, number: float) -> str:
    """The name of a choice parameter's wire number (for explanations and reports)."""
    return CHOICES[name][int(number)]

"""One run setting's value, read and checked the same way whatever it came from (the YAML
file, a flag, `--set`, a POWERTRIP_RUN_* variable), so a bad one is named by its source
with the same words everywhere (powertrip/core/config.py reads every source through here)."""

from __future__ import annotations

from typing import Any

import yaml

from powertrip.core.policies.base import param_number
from powertrip.core.settings import field_choices

#: settings with a fixed set of values (the table's `choices`): checked as they are read
#: (YAML, flags, --set), so the message names the source, and again by validate() for
#: configs built in code
FIELD_CHOICES: dict[str, tuple[str, ...]] = field_choices()


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the field."""


def coerce(
    key: str, kind: str, value: Any, source: str, choices: tuple[Any, ...] | None = None
) -> Any:
    """Check the type of one setting, `kind` its annotation (`int`, `float | None`, ...),
    and, for a text setting, that it is one of `choices` (its row's); ints are accepted
    where floats are expected."""
    optional = "None" in kind
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{source}: {key} must not be empty")
    base = kind.replace(" | None", "")
    try:
        if base == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError
            return int(value)
        if base == "float":
            if isinstance(value, bool):
                raise TypeError
            return float(value)
        if base == "bool":
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "yes", "1", "on"):
                return True
            if str(value).lower() in ("false", "no", "0", "off"):
                return False
            raise TypeError
        if base == "str":
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise TypeError
            value = str(value)
            if choices is not None and value not in choices:
                raise ConfigError(
                    f"{source}: {key} must be one of {', '.join(choices)}, got {value!r}"
                )
            return value
        if base.startswith("dict"):
            if not isinstance(value, dict):
                raise TypeError
            try:
                return {str(k): param_number(str(k), v) for k, v in value.items()}
            except ValueError as exc:
                raise ConfigError(f"{source}: {key}.{exc}") from None
    except ConfigError:
        raise
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: {key} must be of type {base}, got {value!r}") from None
    return value


def parse_value(kind: str, text: str) -> Any:
    """One setting's value given as text (`--set KEY=TEXT`, `POWERTRIP_RUN_KEY=TEXT`), `kind`
    its annotation, read as YAML reads it, except that a text setting keeps the text as
    given; empty is None."""
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    if value is not None and kind.replace(" | None", "") == "str":
        value = text.strip()
    return value

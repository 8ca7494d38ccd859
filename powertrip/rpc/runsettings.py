"""The `RunSettings` message: the one path by which a run setting reaches a service.

The sender fills it from the rows of the settings table (powertrip/core/settings.py) that
name the service; the service reads it back typed and checked as a YAML file's value is,
so a new setting a service needs is a row and the code that uses it, never a new field and
a hand-written copy at each hop. Values travel as JSON text: every setting is a number, a
word, a bool, null or a mapping of numbers, and JSON says which without a schema."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from powertrip.core.configvalues import ConfigError, coerce
from powertrip.core.settings import for_service, row_map
from powertrip.v1 import common_pb2


class SettingsError(ValueError):
    """A setting in a RunSettings message is malformed or out of range; names it."""


def settings_message(config: Any, service: str) -> common_pb2.RunSettings:
    """What `service` needs of a run's settings (`config`, a RunConfig), as a message."""
    return settings_of({name: getattr(config, name) for name in for_service(service, type(config))})


def settings_of(values: Mapping[str, Any]) -> common_pb2.RunSettings:
    """Settings by name as a message (a client that holds no RunConfig, a test)."""
    return common_pb2.RunSettings(values={name: json.dumps(v) for name, v in values.items()})


def read_settings(
    message: common_pb2.RunSettings, service: str, defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every setting `service` needs: as the message gives it, else `defaults`' value, else
    its row's default. A name the service does not need is ignored (a newer sender may know
    more settings); a bad value raises SettingsError naming it."""
    rows = row_map()
    out = {name: rows[name].default for name in for_service(service)}
    out.update(defaults or {})
    for name, text in message.values.items():
        if name not in out:
            continue
        row = rows[name]
        try:
            value = coerce(name, row.kind, json.loads(text), "settings", row.choices)
        except json.JSONDecodeError:
            raise SettingsError(f"settings: {name}: not JSON: {text[:40]!r}") from None
        except ConfigError as exc:
            raise SettingsError(str(exc)) from None
        problem = row.range_problem(value)
        if problem is not None:
            raise SettingsError(f"settings: {name}: {problem}")
        out[name] = value
    return out

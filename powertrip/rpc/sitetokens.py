"""Per-site join tokens (`--site-tokens`): read by the aggregator and by a site worker."""

from __future__ import annotations

from pathlib import Path

import yaml

from powertrip.core.config import ConfigError


def load_site_tokens(path: str | Path) -> dict[str, str]:
    """Per-site join tokens: a YAML mapping `site-000: <token>`; errors name the entry."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read site tokens file {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{path}: expected a mapping of site id -> token")
    tokens: dict[str, str] = {}
    for site, token in data.items():
        if not isinstance(token, str) or len(token) < 16:
            raise ConfigError(f"{path}: token of {site}: must be a string of >= 16 characters")
        tokens[str(site)] = token
    if len(set(tokens.values())) != len(tokens):
        raise ConfigError(f"{path}: two sites share a token; every site needs its own")
    return tokens

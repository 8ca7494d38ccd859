"""The run configuration: the settings table's fields (settings.py) with how they are
loaded from YAML, flags, `--set` and variables, validated with messages that name the field
and the allowed values, and written back fully resolved. Each value is read and checked by
configvalues.py (ConfigError, imported from here by its callers, is defined there), the
settings together by configcheck.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from powertrip.core import deltacodec, provenance, settings
from powertrip.core.configcheck import check_settings
from powertrip.core.configvalues import ConfigError, coerce, parse_value
from powertrip.core.policies.base import param_number
from powertrip.core.profiles import PopulationSpec
from powertrip.core.settings import RunSettings

#: Execution settings: how a run is carried out (processes, threads, where the data is read,
#: how long a round may take in wall time, whether checkpoints are written), never what it
#: computes; results are bit-identical whatever they are. A resumed run (aggregator
#: --resume), a finished run reused by compare/sweep and one reused by reproduce may differ
#: from the request only here (and in the limits each names on top: `RUN_LIMITS`).
EXECUTION_SETTINGS = settings.execution_settings()
#: limits on a run's length: a resumed run may extend them
RUN_LIMITS = settings.run_limits()
#: settings added after runs were stored, with what their absence meant: a stored
#: configuration without one ran as that, so finished runs (results/reproduce/) stay finished
LATER_SETTINGS: dict[str, Any] = settings.later_settings()
#: the paper's value of each setting whose product default moved away from it (the study
#: that moved it is in results/claims.md); configs/reproduce.yaml runs the paper's method
#: with these (tests/unit/test_default_agreement.py holds it to them)
PAPER_VALUES: dict[str, Any] = settings.paper_values()
_ABSENT = object()


def as_stored(data: dict[str, Any], cls: type = RunSettings) -> dict[str, Any]:
    """A stored run's settings with each setting added since it ran at what its absence
    meant then (`LATER_SETTINGS`, or the rows of `cls`)."""
    later = settings.later_settings(cls)
    return {**{k: v for k, v in later.items() if k not in data}, **data}


def experiment_differences(stored: dict[str, Any], wanted: dict[str, Any], *, also=()) -> list[str]:
    """The experiment settings on which two configurations (as `to_dict()` mappings)
    disagree, ignoring `EXECUTION_SETTINGS` and the names in `also`; a `LATER_SETTINGS`
    key missing from `stored` counts as its default."""
    ignored = EXECUTION_SETTINGS | frozenset(also)
    return sorted(
        k
        for k, v in wanted.items()
        if k not in ignored and stored.get(k, LATER_SETTINGS.get(k, _ABSENT)) != v
    )


class RunConfig(RunSettings):
    """A run's settings (the table: powertrip/core/settings.py) and how they are read,
    checked and written. Methods derive what they know of a setting from the rows of
    `type(self)`, so a subclass that adds a row is read, checked and stored as these are."""

    # ---- loading -----------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str = "config") -> RunConfig:
        """A config from a mapping of settings. A stored run's config.yaml (it has a
        `provenance` block: what made it, not a setting, so skipped) holds every setting that
        existed when it ran; one added since takes what its absence meant then
        (`LATER_SETTINGS`), not today's default, so `--config RUN/config.yaml` reruns that
        run after a default has moved."""
        if isinstance(data, dict) and provenance.KEY in data:
            data = as_stored({k: v for k, v in data.items() if k != provenance.KEY}, cls)
        return cls().with_values(data, source)

    @classmethod
    def from_run(cls, path: str | Path) -> RunConfig:
        """A stored run's configuration (its config.yaml or run-config.yaml), with or without
        a provenance block: a setting added since it ran takes what its absence meant then
        (`LATER_SETTINGS`), so replaying it decides as it did (a run from before int8 deltas
        moved full updates)."""
        data = cls._read_yaml(Path(path))
        stored = as_stored(data, cls) if isinstance(data, dict) else data
        return cls.from_mapping(stored, str(path))

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        path = Path(path)
        return cls.from_mapping(cls._read_yaml(path), source=str(path))

    @staticmethod
    def _read_yaml(path: Path) -> Any:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
        try:
            return yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from exc

    def with_values(self, data: Any, source: str = "config") -> RunConfig:
        """A copy with `data`'s settings, each checked and coerced as a YAML file's are (the
        one path every source takes: YAML, flags, --set, POWERTRIP_RUN_* variables), a bad
        one named by `source`; unknown keys name the allowed ones."""
        if not isinstance(data, dict):
            raise ConfigError(
                f"{source}: expected a mapping of settings, got {type(data).__name__}"
            )
        unknown = sorted(str(k) for k in set(data) - set(self.field_names()))
        if unknown:
            raise ConfigError(
                f"{source}: unknown key(s) {', '.join(unknown)}; allowed keys: "
                f"{', '.join(self.field_names())}"
            )
        rows = settings.row_map(type(self))
        config = dataclasses.replace(self, policy_params=dict(self.policy_params))
        sources = dict(self.sources())
        for key, value in data.items():
            row = rows[key]
            setattr(config, key, coerce(key, row.kind, value, source, row.choices))
            sources[key] = source
        config._sources = sources
        return config

    def sources(self) -> dict[str, str]:
        """Where each setting read so far came from (a file, a flag, `--set ...`, an
        environment variable): what validate() names beside a bad value."""
        return getattr(self, "_sources", {})

    def with_overrides(self, flags: dict[str, str] | None = None, **overrides: Any) -> RunConfig:
        """A copy with the given settings from command-line flags; None leaves a setting as
        it is (an absent flag). A bad value's message names its flag: `--KEY` with `-` for
        `_` (`--sites` for num_sites), or the one `flags` gives for the key."""
        rows = settings.row_map(type(self))
        config = self
        for key, value in overrides.items():
            if value is not None:
                flag = (flags or {}).get(key) or rows[key].flag_name()
                config = config.with_values({key: value}, flag)
        return config

    def with_environment(self, env: dict[str, str], prefix: str = "POWERTRIP_RUN_") -> RunConfig:
        """A copy with `PREFIX<FIELD>` variables (upper case) applied, each value read as
        `--set` reads one (YAML: `{k: 20}`, `null`, `true`), checked as the YAML file's, and
        named by its variable when bad; empty variables are skipped. Any other `PREFIX...`
        variable is an error that lists the allowed names."""
        rows = settings.row_map(type(self))
        allowed = {prefix + name.upper(): name for name in rows}
        unknown = sorted(
            k for k in env if k.startswith(prefix) and k not in allowed and k != prefix + "CONFIG"
        )
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {', '.join(unknown)}; allowed: " + ", ".join(sorted(allowed))
            )
        config = self
        for var, name in allowed.items():
            text = env.get(var, "")
            if text != "":
                config = config.with_values({name: parse_value(rows[name].kind, text)}, var)
        return config

    def with_settings(self, items: Iterable[str]) -> RunConfig:
        """A copy with `--set KEY=VALUE` items applied in order (see parse_setting)."""
        config = self
        for item in items:
            key, value = parse_setting(item, type(self))
            source = f"--set {item}"
            if key.startswith(PARAM_PREFIX):
                name = key[len(PARAM_PREFIX) :]
                value = {**config.policy_params, name: value}
                key = "policy_params"
            config = config.with_values({key: value}, source)
        return config

    # ---- validation --------------------------------------------------------------------
    def validate(self) -> RunConfig:
        """Check the settings together (powertrip/core/configcheck.py); a message names the
        setting and, where it was read from a file, a flag, `--set` or a variable, that
        source (with_values)."""
        check_settings(self)
        return self

    def resolved(self, defaults: Any) -> RunConfig:
        """Fill workload defaults (a WorkloadDefaults) into the unset fields."""
        config = dataclasses.replace(self, policy_params=dict(self.policy_params))
        if config.target_accuracy is None:
            config.target_accuracy = defaults.target_accuracy
        if config.target_perplexity is None:
            config.target_perplexity = defaults.target_perplexity
        if config.update_size_gb is None:
            config.update_size_gb = defaults.update_size_bytes / 1e9
        for name in ("lr", "batch_size", "local_steps", "tau_s", "eval_samples"):
            if name == "tau_s" and config.tau_source == "measured":
                continue  # left unset: the aggregator measures it (powertrip/core/steptime.py)
            if getattr(config, name) is None:
                setattr(config, name, getattr(defaults, name))
        return config

    def population_spec(self) -> PopulationSpec:
        """The site population this run describes; the one place a RunConfig becomes a
        PopulationSpec, so every service that builds sites builds the same ones."""
        return PopulationSpec(
            num_sites=self.num_sites,
            seed=self.seed,
            min_distance_miles=self.min_distance_miles,
            max_distance_miles=self.max_distance_miles,
            distance_distribution=self.distance_distribution,
            population=self.population,
            aggregator_region=self.aggregator_region,
            reference_bandwidth_bytes_per_s=self.reference_bandwidth_gbps * 1e9 / 8,
            link_model=self.link_model,
            min_power=self.min_power,
            max_power=self.max_power,
            gpus_per_site=self.gpus_per_site,
            gpus_available_min_fraction=self.gpus_available_min_fraction,
            gpus_available_max_fraction=self.gpus_available_max_fraction,
        )

    def resolved_policy_params(self) -> dict[str, float]:
        """Every parameter of the run's policy: its defaults today, overridden by the ones
        given. What a run writes, so that it reruns the same after a default moves; an
        unset one (the policy's own choice) as 0, the form every stored run has
        (`PolicyParams.as_numbers`); an unknown policy keeps the given ones (the policy
        service names it)."""
        from powertrip.core.policies import REGISTRY  # the catalogue imports numpy

        cls = REGISTRY.get(self.policy)
        defaults = cls.Params().as_numbers() if cls is not None else {}
        return {**defaults, **self.policy_params}

    def to_dict(self) -> dict[str, Any]:
        """Every setting, the policy's parameters resolved (`resolved_policy_params`): what
        is written and what a stored run is compared against."""
        data = dataclasses.asdict(self)
        data["policy_params"] = self.resolved_policy_params()
        return data

    def write_yaml(self, path: str | Path, made_by: dict[str, Any] | None = None) -> None:
        """The settings as YAML; with `made_by`, a `provenance` block after them (the
        aggregator writes one into config.yaml: powertrip.core.provenance)."""
        data = self.to_dict()
        if made_by is not None:
            data[provenance.KEY] = made_by
        Path(path).write_text(yaml.safe_dump(data, sort_keys=False))

    @property
    def update_size_bytes(self) -> float:
        """M as it crosses the wire: the fp32 update's bytes times the encoding's share
        (deltacodec.WIRE_SHARE), what Eq. 3, the policies and the accounting charge."""
        if self.update_size_gb is None:
            raise ConfigError("update_size_gb is not resolved yet")
        return self.update_size_gb * 1e9 * deltacodec.WIRE_SHARE[self.delta_encoding]


#: `--set policy_params.NAME=VALUE` sets one policy parameter (like `--param NAME=VALUE`)
PARAM_PREFIX = "policy_params."


def parse_setting(item: str, cls: type = RunConfig) -> tuple[str, Any]:
    """`KEY=VALUE` of `--set` -> (key, value), the value read as YAML reads it (`lr=0.01`,
    `shadow=false`, `target_accuracy=null`, `policy_params={k: 20}`), except that a text
    setting keeps the text as given (`data_dir=2024`). The value is checked by the caller,
    through the same coercion as a YAML file's."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set lr=0.01")
    if key.startswith(PARAM_PREFIX):
        name = key[len(PARAM_PREFIX) :]
        if not name:
            raise ConfigError(f"--set {item}: expected policy_params.NAME=VALUE")
        try:
            return key, param_number(name, text)
        except ValueError as exc:
            raise ConfigError(f"--set {item}: policy_params.{exc}") from None
    rows = settings.row_map(cls)
    if key not in rows:
        raise ConfigError(f"--set {item}: unknown key {key}; allowed keys: {', '.join(rows)}")
    return key, parse_value(rows[key].kind, text)

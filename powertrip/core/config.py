"""The run configuration: one dataclass, loaded from YAML and/or flags, validated with
messages that name the field and the allowed values, and written back fully resolved."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from powertrip.core import footprint, provenance
from powertrip.core.clocks import CLOCKS
from powertrip.core.peftspec import PeftSpec, PeftSpecError
from powertrip.core.policies.base import param_number
from powertrip.core.profiles import (
    DISTANCE_DISTRIBUTIONS,
    GPUS_PER_SITE,
    LINK_MODELS,
    PopulationSpec,
)
from powertrip.core.timemodel import WORK_MODELS

ESTIMATORS = ("paper", "clock")
POWER_MODES = ("uniform", "trace")
TRAINERS = ("loop", "vmap")  # powertrip.core.batched.TRAINERS
#: where tau_s comes from: as given, or measured at run start (powertrip/core/steptime.py)
TAU_SOURCES = ("fixed", "measured")
#: the radius and share the calibrated distances are fitted to (paper Fig. 9: 22 of 100 sites
#: within 1,000 miles); a run uses PopulationSpec's defaults
CALIBRATION_RADIUS_MILES = PopulationSpec.radius_miles
CALIBRATION_SHARE = PopulationSpec.radius_share
#: settings with a fixed set of values: checked as they are read (YAML, flags, --set), so the
#: message names the source, and again by validate() for configs built in code
FIELD_CHOICES: dict[str, tuple[str, ...]] = {
    "clock": CLOCKS,
    "work_model": WORK_MODELS,
    "estimator": ESTIMATORS,
    "power": POWER_MODES,
    "trainer": TRAINERS,
    "tau_source": TAU_SOURCES,
    "distance_distribution": DISTANCE_DISTRIBUTIONS,
    "link_model": LINK_MODELS,
}

#: the command-line flag of a setting whose flag is not `--` + its name with `-` for `_`
FLAGS: dict[str, str] = {"num_sites": "--sites"}


#: Execution settings: how a run is carried out (processes, threads, where the data is read,
#: how long a round may take in wall time, whether checkpoints are written), never what it
#: computes; results are bit-identical whatever they are. Every other field is an
#: experiment setting. The one list: a resumed run (aggregator --resume), a finished run
#: reused by compare/sweep and one reused by reproduce may differ from the request only here
#: (and in the limits each names on top: `RUN_LIMITS`).
EXECUTION_SETTINGS = frozenset(
    {"workers", "threads_per_worker", "train_threads", "data_dir", "round_deadline_s", "checkpoint"}
)
#: limits on a run's length: a resumed run may extend them
RUN_LIMITS = frozenset({"max_rounds", "max_sim_hours"})


#: settings added after runs were stored, with their defaults: a stored configuration without
#: one ran as its default says, so finished runs (results/reproduce/) stay finished
LATER_SETTINGS: dict[str, Any] = {
    **footprint.SETTINGS,
    "fused_sgd": False,
    "link_model": "inverse",
    "tau_source": "fixed",
    "gpus_available_min_fraction": 1.0,
    "gpus_available_max_fraction": 1.0,
    "peft": "none",
    "target_perplexity": None,
}
_ABSENT = object()


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


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the field."""


@dataclass
class RunConfig:
    policy: str = "powertrip"
    policy_params: dict[str, float] = field(default_factory=dict)
    workload: str = "femnist"
    num_sites: int = 100
    max_rounds: int = 100
    #: stop a run once its simulated time passes this many hours (0 = no limit)
    max_sim_hours: float = 0.0
    target_accuracy: float | None = None  # None: the workload's default
    #: a held-out perplexity (exp of the mean cross-entropy) that replaces target_accuracy as
    #: the run's target: next-token accuracy on a small language model moves a point or two
    #: in fine-tuning, within its evaluation's noise, while the loss falls smoothly. None: the
    #: workload's default (shakespeare-lm has one, the others none); 0: no perplexity target
    target_perplexity: float | None = None
    update_size_gb: float | None = None  # emulated M; None: the workload's default
    seed: int = 0
    clock: str = "simulated"
    work_model: str = "local-steps"
    #: how the sites fine-tune a pretrained base: none (in full), lora or qlora, with
    #: options, e.g. "lora:r=8,alpha=16" (powertrip/core/peft.py; shakespeare-lm only)
    peft: str = "none"
    estimator: str = "paper"
    #: transfers charged per round: 1 = the site's update to the aggregator, as the paper's
    #: Eq. 3 and §5.1 charge it; 2 also charges the model download
    comm_directions: int = 1
    aggregation_s: float = 1.0
    power: str = "uniform"  # "trace": Google PowerData 2019 replay (data/google-power/)
    power_trace: str | None = None  # trace file for power=trace (default: the shipped cell a)
    gpus_per_site: int = GPUS_PER_SITE  # N_max per site; trace mode's power granularity
    #: N_avail,i (paper Eq. 6's hardware side) drawn per site from
    #: [ceil(min x gpus_per_site), floor(max x gpus_per_site)]; 1, 1 = every site has all
    #: gpus_per_site GPUs, as every run did before (powertrip/core/profiles.py)
    gpus_available_min_fraction: float = 1.0
    gpus_available_max_fraction: float = 1.0
    lr: float | None = None
    batch_size: int | None = None
    local_steps: int | None = None
    tau_s: float | None = None
    #: "fixed": tau_s as given (the workload's default unless set); "measured": tau_s (left
    #: unset) is the workload's median step time on the training device x local_steps,
    #: measured by the aggregator at run start (powertrip/core/steptime.py) and recorded in the
    #: run's config.yaml; simulated times then depend on the machine that measured it
    tau_source: str = "fixed"
    eval_samples: int | None = None
    min_distance_miles: float = 100.0
    max_distance_miles: float = 10_000.0
    #: B_ref (ours: the paper gives no link speeds): under link_model "inverse" the bandwidth
    #: at 100 miles, falling as 1/distance; under "fig5" the flat bandwidth within 1,000 miles
    reference_bandwidth_gbps: float = 10.0
    #: "inverse": bandwidth ~ 1/distance (paper §5.1); "fig5": flat within 1,000 miles, then
    #: ~ 1/distance (paper Fig. 5 as §5.3 describes it); powertrip/core/profiles.py has both
    link_model: str = "inverse"
    #: "calibrated": 22 % of sites within 1,000 miles (paper Fig. 9); "uniform": U[min, max]
    #: (powertrip/core/profiles.py has the formula)
    distance_distribution: str = "calibrated"
    #: uniform power mode draws p_i ~ U[min_power, max_power] once (paper §5.1: U[0.1, 1.0]);
    #: min_power = max_power = 1 gives identical full-power sites (paper Figs. 6-7)
    min_power: float = 0.1
    max_power: float = 1.0
    workers: int = 1  # site-worker processes in the embedded deployment
    threads_per_worker: int = 1  # torch intra-op threads per training thread
    #: sites each worker trains at once, one thread and model replica each; 0 = one per CPU
    #: core. One worker with a thread per core stays busy however a round's selection falls,
    #: where a process per core idles one when the selection splits unevenly between them.
    train_threads: int = 0
    #: how a worker trains its virtual sites: "loop" (one after another) or "vmap"
    #: (`site_batch` sites per forward/backward); the same math either way (bench/RESULTS.md)
    trainer: str = "loop"
    site_batch: int = 1
    channels_last: bool = True  # NHWC convolutions in the loop trainer (faster on CPU)
    #: plain SGD applied inside each linear layer's weight-gradient product (loop trainer,
    #: SGD workloads; powertrip/core/fused_sgd.py): less memory traffic, the same math up to
    #: float rounding, so an experiment setting; runs stored before it existed ran without
    fused_sgd: bool = True
    round_deadline_s: float = 600.0  # wall-clock seconds a round may take before giving up
    data_dir: str | None = None
    shadow: bool = True
    checkpoint: bool = True
    #: energy, egress cost and carbon accounting (powertrip/core/footprint.py has each default's
    #: source); carbon_trace: a per-site CSV (site_id, g_per_kwh[, hour])
    gpu_power_w: float = footprint.GPU_POWER_W
    gpu_idle_power_w: float = footprint.GPU_IDLE_POWER_W
    egress_usd_per_gb: float = footprint.EGRESS_USD_PER_GB
    carbon_g_per_kwh: float = footprint.CARBON_G_PER_KWH
    carbon_trace: str | None = None

    # ---- loading -----------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str = "config") -> RunConfig:
        """A config from a mapping of settings; a stored run's `provenance` block (what made
        it, not a setting) is skipped, so `--config RUN/config.yaml` reruns that run."""
        if isinstance(data, dict) and provenance.KEY in data:
            data = {k: v for k, v in data.items() if k != provenance.KEY}
        return cls().with_values(data, source)

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
        return cls.from_mapping(data, source=str(path))

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
        config = dataclasses.replace(self, policy_params=dict(self.policy_params))
        sources = dict(self.sources())
        for key, value in data.items():
            setattr(config, key, _coerce(key, value, source))
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
        config = self
        for key, value in overrides.items():
            if value is not None:
                flag = (flags or {}).get(key) or FLAGS.get(key) or "--" + key.replace("_", "-")
                config = config.with_values({key: value}, flag)
        return config

    def with_environment(self, env: dict[str, str], prefix: str = "POWERTRIP_RUN_") -> RunConfig:
        """A copy with `PREFIX<FIELD>` variables (upper case) applied, each value read as
        `--set` reads one (YAML: `{k: 20}`, `null`, `true`), checked as the YAML file's, and
        named by its variable when bad; empty variables are skipped. Any other `PREFIX...`
        variable is an error that lists the allowed names."""
        fields_ = self.field_names()
        allowed = {prefix + name.upper(): name for name in fields_}
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
                config = config.with_values({name: parse_value(name, text)}, var)
        return config

    def with_settings(self, items: Iterable[str]) -> RunConfig:
        """A copy with `--set KEY=VALUE` items applied in order (see parse_setting)."""
        config = self
        for item in items:
            key, value = parse_setting(item)
            source = f"--set {item}"
            if key.startswith(PARAM_PREFIX):
                name = key[len(PARAM_PREFIX) :]
                value = {**config.policy_params, name: value}
                key = "policy_params"
            config = config.with_values({key: value}, source)
        return config

    # ---- validation --------------------------------------------------------------------
    def validate(self) -> RunConfig:
        """Check the settings together; a message names the setting and, where it was read
        from a file, a flag, `--set` or a variable, that source (with_values)."""
        sources = self.sources()

        def named(message: str, *keys: str) -> str:
            given = dict.fromkeys(sources[k] for k in keys if k in sources)
            return f"{', '.join(given)}: {message}" if given else message

        def need(ok: bool, name: str, message: str, *also: str) -> None:
            if not ok:
                key = name.split(" ")[0].split(".")[0]
                if key in sources:  # "num_sites (--sites)": the source is named instead
                    name = name.split(" (")[0]
                raise ConfigError(named(f"{name}: {message}", key, *also))

        for name, allowed in FIELD_CHOICES.items():  # the same words as the coercion path's
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(
                    named(f"{name} must be one of {', '.join(allowed)}, got {value!r}", name)
                )
        try:
            PeftSpec.parse(self.peft)
        except PeftSpecError as exc:
            raise ConfigError(named(str(exc), "peft")) from None
        need(self.num_sites >= 1, "num_sites (--sites)", f"must be >= 1, got {self.num_sites}")
        need(self.max_rounds >= 1, "max_rounds", f"must be >= 1, got {self.max_rounds}")
        need(self.max_sim_hours >= 0, "max_sim_hours", f"must be >= 0, got {self.max_sim_hours}")
        if self.target_accuracy is not None:
            need(
                0 < self.target_accuracy <= 1,
                "target_accuracy",
                f"must be in (0, 1], got {self.target_accuracy}",
            )
        if self.target_perplexity is not None:
            need(
                self.target_perplexity == 0 or self.target_perplexity > 1,
                "target_perplexity",
                f"must be > 1 (a perplexity), 0 (none: the accuracy target) or null (the "
                f"workload's default), got {self.target_perplexity}",
            )
        if self.update_size_gb is not None:
            need(
                self.update_size_gb > 0, "update_size_gb", f"must be > 0, got {self.update_size_gb}"
            )
        need(self.comm_directions in (1, 2), "comm_directions", "must be 1 (upload) or 2 (both)")
        need(self.aggregation_s >= 0, "aggregation_s", f"must be >= 0, got {self.aggregation_s}")
        need(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        for name in ("lr", "tau_s"):
            value = getattr(self, name)
            if value is not None:
                need(value > 0, name, f"must be > 0, got {value}")
        need(
            self.tau_source != "measured" or self.tau_s is None,
            "tau_s",
            f"is {self.tau_s:g} but tau_source measured measures it at run start; unset it "
            "(tau_s=null) or use tau_source fixed"
            if self.tau_s is not None
            else "",
            "tau_source",
        )
        for name in ("batch_size", "local_steps", "eval_samples"):
            value = getattr(self, name)
            if value is not None:
                need(value >= 1, name, f"must be >= 1, got {value}")
        need(
            0 <= self.min_distance_miles <= self.max_distance_miles,
            "min_distance_miles",
            "must satisfy 0 <= min_distance_miles <= max_distance_miles",
            "max_distance_miles",
        )
        need(
            self.distance_distribution != "calibrated"
            or self.min_distance_miles < CALIBRATION_RADIUS_MILES < self.max_distance_miles,
            "distance_distribution",
            f"'calibrated' places {CALIBRATION_SHARE:.0%} of the sites within "
            f"{CALIBRATION_RADIUS_MILES:g} miles, so it needs min_distance_miles < "
            f"{CALIBRATION_RADIUS_MILES:g} < max_distance_miles (got "
            f"{self.min_distance_miles:g}, {self.max_distance_miles:g}); widen the range or "
            "use 'uniform'",
            "min_distance_miles",
            "max_distance_miles",
        )
        need(
            0 < self.min_power <= 1,
            "min_power",
            f"must satisfy 0 < min_power <= max_power <= 1, got {self.min_power}",
        )
        need(
            self.min_power <= self.max_power <= 1,
            "max_power",
            f"must satisfy 0 < min_power <= max_power <= 1, got min_power={self.min_power}, "
            f"max_power={self.max_power}",
            "min_power",
        )
        need(
            self.reference_bandwidth_gbps > 0,
            "reference_bandwidth_gbps",
            f"must be > 0, got {self.reference_bandwidth_gbps}",
        )
        need(self.gpus_per_site >= 1, "gpus_per_site", f"must be >= 1, got {self.gpus_per_site}")
        need(
            0 < self.gpus_available_min_fraction <= self.gpus_available_max_fraction <= 1,
            "gpus_available_min_fraction",
            "must satisfy 0 < gpus_available_min_fraction <= gpus_available_max_fraction <= 1, "
            f"got {self.gpus_available_min_fraction}, {self.gpus_available_max_fraction}",
            "gpus_available_max_fraction",
        )
        need(self.workers >= 1, "workers", f"must be >= 1, got {self.workers}")
        need(self.threads_per_worker >= 1, "threads_per_worker", "must be >= 1")
        need(
            self.train_threads >= 0,
            "train_threads",
            f"must be >= 0 (0 = one per CPU core), got {self.train_threads}",
        )
        need(self.site_batch >= 1, "site_batch", f"must be >= 1, got {self.site_batch}")
        need(self.round_deadline_s > 0, "round_deadline_s", "must be > 0")
        for key, value in self.policy_params.items():
            need(isinstance(value, int | float), f"policy_params.{key}", "must be a number")
        try:
            footprint.spec_of(self)  # its carbon trace read: a bad file is named now
        except footprint.FootprintError as exc:
            message = str(exc)  # "carbon_trace: ...", "gpu_power_w must ..."
            raise ConfigError(named(message, message.split(":")[0].split(" ")[0])) from None
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
        unknown policy keeps the given ones (the policy service names it)."""
        from powertrip.core.policies import REGISTRY  # the catalogue imports numpy

        cls = REGISTRY.get(self.policy)
        defaults = cls.default_params if cls is not None else {}
        return {**{k: float(v) for k, v in defaults.items()}, **self.policy_params}

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
        if self.update_size_gb is None:
            raise ConfigError("update_size_gb is not resolved yet")
        return self.update_size_gb * 1e9


_TYPES: dict[str, Any] = {f.name: f.type for f in fields(RunConfig)}


def _coerce(key: str, value: Any, source: str) -> Any:
    """Check the type of one setting; ints are accepted where floats are expected."""
    kind = _TYPES[key]
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
            choices = FIELD_CHOICES.get(key)
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


#: `--set policy_params.NAME=VALUE` sets one policy parameter (like `--param NAME=VALUE`)
PARAM_PREFIX = "policy_params."


def parse_setting(item: str) -> tuple[str, Any]:
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
    if key not in _TYPES:
        raise ConfigError(
            f"--set {item}: unknown key {key}; allowed keys: {', '.join(RunConfig.field_names())}"
        )
    return key, parse_value(key, text)


def parse_value(key: str, text: str) -> Any:
    """One setting's value given as text (`--set KEY=TEXT`, `POWERTRIP_RUN_KEY=TEXT`), read
    as YAML reads it, except that a text setting keeps the text as given; empty is None."""
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    if value is not None and _TYPES[key].replace(" | None", "") == "str":
        value = text.strip()
    return value

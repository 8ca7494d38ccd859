"""The run configuration: one dataclass, loaded from YAML and/or flags, validated with
messages that name the field and the allowed values, and written back fully resolved.
Each value is read and checked by configvalues.py (ConfigError, imported from here by its
callers, is defined there), the settings together by configcheck.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from powertrip.core import deltacodec, footprint, outer, provenance
from powertrip.core.configcheck import check_settings
from powertrip.core.configvalues import ConfigError, coerce, parse_value
from powertrip.core.policies.base import param_number
from powertrip.core.policies.objective import CARBON_SLACK
from powertrip.core.profiles import AGGREGATOR_REGION, GPUS_PER_SITE, PopulationSpec

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
    "outer_optimizer": "fedavg",
    "outer_lr": outer.OUTER_LR,
    "outer_momentum": outer.OUTER_MOMENTUM,
    "delta_encoding": "fp32",
    "population": "synthetic",
    "aggregator_region": AGGREGATOR_REGION,
    "objective": "time",
    "carbon_slack": CARBON_SLACK,
}
#: the paper's value of each setting whose product default moved away from it (the study
#: that moved it is in results/claims.md); configs/reproduce.yaml runs the paper's method
#: with these (tests/unit/test_default_agreement.py holds it to them)
PAPER_VALUES: dict[str, Any] = {
    "outer_optimizer": "fedavg",  # Eq. 2: the model moves by the weighted average
    "delta_encoding": "fp32",  # full updates of M bytes (Eq. 3)
    "comm_directions": 1,  # Eq. 3 charges the update's upload
}
_ABSENT = object()


def as_stored(settings: dict[str, Any]) -> dict[str, Any]:
    """A stored run's settings with each setting added since it ran at what its absence
    meant then (`LATER_SETTINGS`)."""
    return {**{k: v for k, v in LATER_SETTINGS.items() if k not in settings}, **settings}


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
    #: where the sites are (powertrip/core/profiles.py): "synthetic", distances drawn as
    #: above; "regions", Google Cloud's regions (data/regions/regions.csv), each at its
    #: great-circle distance from `aggregator_region` and charged its own grid's carbon
    #: intensity (num_sites <= 40: the nearest to the aggregator take part)
    population: str = "synthetic"
    aggregator_region: str = AGGREGATOR_REGION
    #: what each round optimises (powertrip/core/policies/objective.py): "time", the paper's;
    #: "carbon", the policy's k with its sites re-chosen for less CO2 (Eq. 8 with the grid's
    #: term) while a round is predicted to take at most carbon_slack x the time objective's
    objective: str = "time"
    carbon_slack: float = CARBON_SLACK
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
    #: how the averaged delta moves the model (powertrip/core/outer.py): "nesterov" takes
    #: DiLoCo's outer SGD step with Nesterov momentum, outer_lr and outer_momentum
    #: (OpenDiLoCo's 0.7 and 0.9), the default by the study of figure `outer`
    #: (results/claims.md); "fedavg" adds the average as is (the paper's Eq. 2, what
    #: configs/reproduce.yaml runs; it uses neither outer_lr nor outer_momentum)
    outer_optimizer: str = "nesterov"
    outer_lr: float = outer.OUTER_LR
    outer_momentum: float = outer.OUTER_MOMENTUM
    #: how sites encode their deltas for upload (powertrip/core/deltacodec.py): "int8" a
    #: quarter of the bytes (per-tensor symmetric), the default by the same study; "fp32" as
    #: they are (the paper's, what configs/reproduce.yaml runs). M (update_size_gb, the fp32
    #: update) is charged at that share
    delta_encoding: str = "int8"
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
        """A config from a mapping of settings. A stored run's config.yaml (it has a
        `provenance` block: what made it, not a setting, so skipped) holds every setting that
        existed when it ran; one added since takes what its absence meant then
        (`LATER_SETTINGS`), not today's default, so `--config RUN/config.yaml` reruns that
        run after a default has moved."""
        if isinstance(data, dict) and provenance.KEY in data:
            data = as_stored({k: v for k, v in data.items() if k != provenance.KEY})
        return cls().with_values(data, source)

    @classmethod
    def from_run(cls, path: str | Path) -> RunConfig:
        """A stored run's configuration (its config.yaml or run-config.yaml), with or without
        a provenance block: a setting added since it ran takes what its absence meant then
        (`LATER_SETTINGS`), so replaying it decides as it did (a run from before int8 deltas
        moved full updates)."""
        data = cls._read_yaml(Path(path))
        return cls.from_mapping(as_stored(data) if isinstance(data, dict) else data, str(path))

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
        config = dataclasses.replace(self, policy_params=dict(self.policy_params))
        sources = dict(self.sources())
        for key, value in data.items():
            setattr(config, key, coerce(key, _TYPES[key], value, source))
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
                config = config.with_values({name: parse_value(_TYPES[name], text)}, var)
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


_TYPES: dict[str, Any] = {f.name: f.type for f in fields(RunConfig)}


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
    return key, parse_value(_TYPES[key], text)

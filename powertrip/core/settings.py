"""Every run setting, one row each: its type, default, allowed values or range, the paper's
value, what a stored run without it ran as, the services that need it, the Flower strategy's
default where it differs, and its help text. Everything else that knows a setting reads it
from here: RunConfig (config.py, the behaviour on top of these fields), the coercion of a
value from any source, the range checks, `LATER_SETTINGS`, the flags, `powertrip config
settings`, docs/cli.md's table and the Flower strategy's defaults. Adding a setting is one
row here, the code that acts on it, and a test.

A row is a dataclass field made by `setting(...)`; `rows(cls)` reads them back, so a class
that adds a field with `setting(...)` is known everywhere its instances go."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field, fields
from typing import Any

from powertrip.core import footprint, outer
from powertrip.core.clocks import CLOCKS
from powertrip.core.deltacodec import DELTA_ENCODINGS
from powertrip.core.policies.base import ESTIMATORS
from powertrip.core.policies.objective import CARBON_SLACK, OBJECTIVES
from powertrip.core.profiles import (
    AGGREGATOR_REGION,
    DISTANCE_DISTRIBUTIONS,
    GPUS_PER_SITE,
    LINK_MODELS,
    POPULATIONS,
)
from powertrip.core.timemodel import WORK_MODELS

POWER_MODES = ("uniform", "trace")
TRAINERS = ("loop", "vmap")  # powertrip.core.batched takes them from here
#: where tau_s comes from: as given, or measured at run start (powertrip/core/steptime.py)
TAU_SOURCES = ("fixed", "measured")

#: the services besides the aggregator (which holds every setting) that a setting reaches, in
#: the RunSettings message of their requests (proto/powertrip/v1/common.proto). The profiler
#: is not one: it serves a population built at its start, from the run configuration file
#: every service is pointed at (POWERTRIP_CONFIG), before any request arrives.
SERVICES = ("policy", "site_worker")


class _Same:
    """A row's paper or Flower value that is the product default (the usual case)."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()
#: `later` of a setting every stored run has (it existed from the first run on)
ALWAYS: Any = type("Always", (), {"__repr__": lambda self: "ALWAYS"})()


@dataclass(frozen=True)
class Setting:
    """One row of the table (see the module docstring)."""

    name: str
    kind: str  # the annotation: "int", "float | None", "dict[str, float]", ...
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    at_least: float | None = None  # value >= at_least (None values are not checked)
    above: float | None = None  # value > above
    at_most: float | None = None  # value <= at_most
    #: what a stored run without this setting ran as (ALWAYS: every stored run has it)
    later: Any = ALWAYS
    paper: Any = SAME  # the paper's value, where the product's default moved away from it
    flower: Any = SAME  # the Flower strategy's default, where it differs ...
    flower_why: str = ""  # ... and why
    services: tuple[str, ...] = ()  # SERVICES that need it
    #: how a run is carried out, never what it computes (results are bit-identical whatever
    #: it is): a resumed or reused run may differ from the request here
    execution: bool = False
    run_limit: bool = False  # a limit on a run's length: a resumed run may extend it
    flag: str | None = None  # its command-line flag where not --NAME with - for _

    @property
    def base(self) -> str:
        """The type without `| None`."""
        return self.kind.replace(" | None", "")

    @property
    def optional(self) -> bool:
        return "None" in self.kind

    def flag_name(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def range_text(self) -> str:
        """The allowed range in words ("", ">= 1", "in (0, 1]")."""
        low = (
            f"[{self.at_least:g}" if self.at_least is not None
            else f"({self.above:g}" if self.above is not None else None
        )  # fmt: skip
        if low is not None and self.at_most is not None:
            return f"in {low}, {self.at_most:g}]"
        if self.at_least is not None:
            return f">= {self.at_least:g}"
        if self.above is not None:
            return f"> {self.above:g}"
        if self.at_most is not None:
            return f"<= {self.at_most:g}"
        return ""

    def range_problem(self, value: Any) -> str | None:
        """Why `value` is out of this row's range, or None (an unset optional value is in)."""
        if value is None or not isinstance(value, int | float) or not self.range_text():
            return None
        ok = (
            (self.at_least is None or value >= self.at_least)
            and (self.above is None or value > self.above)
            and (self.at_most is None or value <= self.at_most)
        )
        return None if ok else f"must be {self.range_text()}, got {value}"

    def allowed_text(self) -> str:
        """What a value may be, for help and docs."""
        if self.choices is not None:
            return " | ".join(str(c) for c in self.choices)
        return self.range_text()


def setting(default: Any, help: str, **row: Any) -> Any:
    """A RunSettings field with its row (`Setting`'s fields but name, kind and default); a
    mutable default (a dict) is copied for each instance."""
    meta = {"row": row, "help": help}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RunSettings:
    """The settings of a run. RunConfig (config.py) adds how they are read, checked and
    written; this is the table."""

    policy: str = setting("powertrip", "the site-selection policy (`powertrip policies`)")
    policy_params: dict[str, float] = setting(
        {}, "the policy's parameters, e.g. {k: 3} (`powertrip policies`)"
    )
    workload: str = setting(
        "femnist", "what the sites train (docs/workloads.md)", services=("site_worker",)
    )
    num_sites: int = setting(
        100, "sites in the population", at_least=1, flag="--sites",
        services=("site_worker",),
    )  # fmt: skip
    max_rounds: int = setting(100, "round limit", at_least=1, run_limit=True)
    max_sim_hours: float = setting(
        0.0, "stop once simulated time passes this many hours (0 = no limit)", at_least=0,
        run_limit=True,
    )  # fmt: skip
    max_wall_hours: float = setting(
        0.0, "stop once this process has spent this many wall-clock hours on rounds (0 = no "
        "limit), a cap on what a run costs on rented machines; a resumed run starts a new "
        "allowance", at_least=0, run_limit=True, later=0.0,
    )  # fmt: skip
    target_accuracy: float | None = setting(
        None, "held-out accuracy that ends the run (null: the workload's)", above=0, at_most=1,
        services=("policy",),
    )  # fmt: skip
    target_perplexity: float | None = setting(
        None, "held-out perplexity that replaces target_accuracy as the target: a language "
        "model's next-token accuracy moves within its evaluation's noise while the loss falls "
        "smoothly (null: the workload's, shakespeare-lm has one; 0: none)", later=None,
    )  # fmt: skip
    update_size_gb: float | None = setting(
        None, "emulated update size M of the fp32 update (null: the workload's)", above=0
    )
    seed: int = setting(
        0, "seed for sites, data split, training and the policy's draws", at_least=0,
        services=("policy", "site_worker"),
    )  # fmt: skip
    clock: str = setting(
        "simulated", "time source: the time model's charge or measured wall time",
        choices=CLOCKS,
    )  # fmt: skip
    work_model: str = setting(
        "local-steps", "how a site's power shortens its round (powertrip/core/timemodel.py)",
        choices=WORK_MODELS, services=("policy",),
    )  # fmt: skip
    peft: str = setting(
        "none", "how the sites fine-tune a pretrained base: none (in full), lora or qlora, "
        "with options, e.g. lora:r=8,alpha=16 (powertrip/core/peft.py; shakespeare-lm only)",
        later="none", services=("site_worker",),
    )  # fmt: skip
    estimator: str = setting(
        "paper", "round-time estimator: the mean power of the top k (paper) or the max over "
        "sites (clock)", choices=ESTIMATORS, services=("policy",), flower=None,
        flower_why="unset: the policy's own where it has one (adaptive's clock), else paper "
        "as the services'; a strategy is built for one policy, so one it would not use is "
        "refused",
    )  # fmt: skip
    comm_directions: int = setting(
        1, "transfers charged per round: 1 the update's upload (the paper's Eq. 3 and §5.1), "
        "2 also the model's download", at_least=1, at_most=2, services=("policy",),
        flower=2, flower_why="a Flower round sends the model down and the update up, and the "
        "strategy cannot know that a node kept the last model",
    )  # fmt: skip
    aggregation_s: float = setting(1.0, "simulated seconds of one aggregation", at_least=0)
    power: str = setting(
        "uniform", "site power: U[min_power, max_power] drawn once, or Google PowerData 2019 "
        "replay (data/google-power/)", choices=POWER_MODES,
    )  # fmt: skip
    power_trace: str | None = setting(None, "trace file for power trace (null: the shipped cell a)")
    gpus_per_site: int = setting(
        GPUS_PER_SITE, "N_max per site; trace mode's power granularity", at_least=1,
    )  # fmt: skip
    gpus_available_min_fraction: float = setting(
        1.0, "N_avail,i (Eq. 6's hardware side) is drawn per site from [ceil(min x "
        "gpus_per_site), floor(max x gpus_per_site)]; 1 and 1: every site has all its GPUs",
        above=0, at_most=1, later=1.0,
    )  # fmt: skip
    gpus_available_max_fraction: float = setting(
        1.0, "see gpus_available_min_fraction", above=0, at_most=1, later=1.0,
    )  # fmt: skip
    lr: float | None = setting(
        None, "the sites' learning rate (null: the workload's)", above=0,
    )  # fmt: skip
    batch_size: int | None = setting(
        None, "the sites' batch size (null: the workload's)", at_least=1,
    )  # fmt: skip
    local_steps: int | None = setting(
        None, "local SGD steps per round (null: the workload's)", at_least=1,
    )  # fmt: skip
    tau_s: float | None = setting(
        None, "seconds of a round's local work at full power (null: the workload's)",
        above=0, services=("policy",),
    )  # fmt: skip
    tau_source: str = setting(
        "fixed", "fixed: tau_s as given; measured: tau_s (unset) is the workload's median "
        "step time on the training device x local_steps, measured at run start "
        "(powertrip/core/steptime.py), so simulated times depend on that machine",
        choices=TAU_SOURCES, later="fixed",
    )  # fmt: skip
    eval_samples: int | None = setting(
        None, "held-out samples evaluated each round (null: the workload's)", at_least=1
    )
    min_distance_miles: float = setting(100.0, "nearest site's distance", at_least=0)
    max_distance_miles: float = setting(10_000.0, "farthest site's distance")
    reference_bandwidth_gbps: float = setting(
        10.0, "B_ref (the paper gives no link speeds): under link_model inverse the bandwidth "
        "at 100 miles, under fig5 the flat bandwidth within 1,000 miles", above=0,
    )  # fmt: skip
    link_model: str = setting(
        "inverse", "inverse: bandwidth ~ 1/distance (paper §5.1); fig5: flat within 1,000 "
        "miles, then ~ 1/distance (Fig. 5 as §5.3 describes it)", choices=LINK_MODELS,
        later="inverse",
    )  # fmt: skip
    distance_distribution: str = setting(
        "calibrated", "calibrated: 22 % of sites within 1,000 miles (paper Fig. 9); uniform: "
        "U[min, max]", choices=DISTANCE_DISTRIBUTIONS,
    )  # fmt: skip
    population: str = setting(
        "synthetic", "where the sites are: synthetic, distances drawn as above; regions, "
        "Google Cloud's regions (data/regions/), each at its distance from aggregator_region "
        "and charged its grid's carbon intensity", choices=POPULATIONS, later="synthetic",
    )  # fmt: skip
    aggregator_region: str = setting(
        AGGREGATOR_REGION, "the aggregator's region under population regions",
        later=AGGREGATOR_REGION,
    )  # fmt: skip
    objective: str = setting(
        "time", "what each round optimises: time (the paper's), or carbon: the policy's k "
        "with its sites re-chosen for less CO2 while a round is predicted to take at most "
        "carbon_slack x the time objective's", choices=OBJECTIVES, later="time",
        services=("policy",),
    )  # fmt: skip
    carbon_slack: float = setting(
        CARBON_SLACK, "the carbon objective's bound on a round's predicted time, as a "
        "multiple of the time objective's", at_least=1, later=CARBON_SLACK,
        services=("policy",),
    )  # fmt: skip
    min_power: float = setting(
        0.1, "uniform power draws p_i ~ U[min_power, max_power] once (paper §5.1)", above=0,
        at_most=1,
    )  # fmt: skip
    max_power: float = setting(
        1.0, "see min_power; min_power = max_power = 1: identical full-power sites (Figs. "
        "6-7)", above=0, at_most=1,
    )  # fmt: skip
    workers: int = setting(
        1, "site-worker processes in the embedded deployment", at_least=1, execution=True
    )
    threads_per_worker: int = setting(
        1, "torch intra-op threads per training thread", at_least=1, execution=True
    )
    train_threads: int = setting(
        0, "sites each worker trains at once, a thread and model replica each (0: one per CPU "
        "core): one worker with a thread per core stays busy however a selection falls",
        at_least=0, execution=True,
    )  # fmt: skip
    trainer: str = setting(
        "loop", "how a worker trains its sites: one after another (loop) or site_batch sites "
        "per forward/backward (vmap); the same math up to float rounding; a remote worker's "
        "own --trainer decides its (a GPU's vmap)", choices=TRAINERS,
    )  # fmt: skip
    site_batch: int = setting(1, "sites per vmap call", at_least=1)
    channels_last: bool = setting(
        True, "NHWC convolutions in the loop trainer", services=("site_worker",)
    )
    fused_sgd: bool = setting(
        True, "plain SGD applied inside each linear layer's weight-gradient product (loop "
        "trainer, SGD workloads; powertrip/core/fused_sgd.py): the same math up to float "
        "rounding", later=False, services=("site_worker",),
    )  # fmt: skip
    outer_optimizer: str = setting(
        "nesterov", "how the averaged delta moves the model (powertrip/core/outer.py): "
        "nesterov, DiLoCo's outer SGD step with Nesterov momentum, the default by the study "
        "of figure outer (results/claims.md); fedavg adds the average as is (the paper's "
        "Eq. 2); fedavgm, FedAvg with server (heavy-ball) momentum, the tuned FedAvg "
        "baseline", choices=outer.OUTER_OPTIMIZERS, later="fedavg", paper="fedavg",
        flower="fedavg", flower_why="a Flower app brings its own model, data and client "
        "optimizer, where DiLoCo's lr 0.7 and momentum 0.9 were chosen on this project's "
        "FEMNIST CNN only; FedAvg's average is what the user's FedAvg did",
    )  # fmt: skip
    outer_lr: float = setting(
        outer.OUTER_LR, "the outer step's learning rate, nesterov and fedavgm only (the "
        "default OpenDiLoCo's)",
        later=outer.OUTER_LR,
    )  # fmt: skip
    outer_momentum: float = setting(
        outer.OUTER_MOMENTUM, "the outer step's momentum, nesterov and fedavgm only (the "
        "default OpenDiLoCo's)",
        later=outer.OUTER_MOMENTUM,
    )  # fmt: skip
    delta_encoding: str = setting(
        "int8", "how sites encode their deltas for upload (powertrip/core/deltacodec.py): "
        "int8, a quarter of the bytes (per-tensor symmetric), the default by the outer "
        "study; fp32 as they are (the paper's); M is charged at that share",
        choices=DELTA_ENCODINGS, later="fp32", paper="fp32", services=("site_worker",),
    )  # fmt: skip
    round_deadline_s: float = setting(
        600.0, "wall-clock seconds a round may take before giving up", above=0, execution=True
    )
    data_dir: str | None = setting(
        None, "data directory for the workload (null: the shipped data)", execution=True,
        services=("site_worker",),
    )  # fmt: skip
    shadow: bool = setting(
        True, "also record what every other policy would pick each round",
        services=("policy",),
    )  # fmt: skip
    checkpoint: bool = setting(True, "write a checkpoint after each round", execution=True)
    gpu_power_w: float = setting(
        footprint.GPU_POWER_W, "a GPU's power while training (powertrip/core/footprint.py "
        "has each default's source)", above=0, later=footprint.GPU_POWER_W,
        services=("policy",),
    )  # fmt: skip
    gpu_idle_power_w: float = setting(
        footprint.GPU_IDLE_POWER_W, "a GPU's power while waiting for the straggler",
        at_least=0, later=footprint.GPU_IDLE_POWER_W, services=("policy",),
    )  # fmt: skip
    egress_usd_per_gb: float = setting(
        footprint.EGRESS_USD_PER_GB, "egress price per GB sent", at_least=0,
        later=footprint.EGRESS_USD_PER_GB,
    )  # fmt: skip
    carbon_g_per_kwh: float = setting(
        footprint.CARBON_G_PER_KWH, "grid carbon intensity where no trace or region gives "
        "one", at_least=0, later=footprint.CARBON_G_PER_KWH,
    )  # fmt: skip
    carbon_trace: str | None = setting(
        None, "a per-site CSV of carbon intensity (site_id, g_per_kwh[, hour])", later=None
    )


@functools.cache
def rows(cls: type = RunSettings) -> tuple[Setting, ...]:
    """The table of a settings class, in field order."""
    return tuple(
        Setting(
            name=f.name,
            kind=str(f.type),
            default=f.default_factory() if f.default is dataclasses.MISSING else f.default,
            help=f.metadata["help"],
            **f.metadata["row"],
        )
        for f in fields(cls)
    )


def row_map(cls: type = RunSettings) -> dict[str, Setting]:
    return {row.name: row for row in rows(cls)}


def later_settings(cls: type = RunSettings) -> dict[str, Any]:
    """Settings added after runs were stored -> what a stored run without one ran as."""
    return {r.name: r.later for r in rows(cls) if r.later is not ALWAYS}


def paper_values(cls: type = RunSettings) -> dict[str, Any]:
    """The paper's value of each setting whose product default moved away from it."""
    return {r.name: r.paper for r in rows(cls) if r.paper is not SAME}


def flower_defaults_that_differ(cls: type = RunSettings) -> dict[str, str]:
    """Setting -> why the Flower strategy's default differs from the product's."""
    return {r.name: r.flower_why for r in rows(cls) if r.flower is not SAME}


def flower_default(name: str) -> Any:
    """The Flower strategy's default of a setting: the product's unless its row says."""
    row = row_map()[name]
    return row.default if row.flower is SAME else row.flower


def field_choices(cls: type = RunSettings) -> dict[str, tuple[Any, ...]]:
    return {r.name: r.choices for r in rows(cls) if r.choices is not None}


def execution_settings(cls: type = RunSettings) -> frozenset[str]:
    return frozenset(r.name for r in rows(cls) if r.execution)


def run_limits(cls: type = RunSettings) -> frozenset[str]:
    return frozenset(r.name for r in rows(cls) if r.run_limit)


def for_service(service: str, cls: type = RunSettings) -> tuple[str, ...]:
    """The settings a service needs (besides the aggregator, which holds them all)."""
    if service not in SERVICES:
        raise ValueError(f"service must be one of {', '.join(SERVICES)}, got {service!r}")
    return tuple(r.name for r in rows(cls) if service in r.services)

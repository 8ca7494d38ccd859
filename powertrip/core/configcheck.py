"""The run configuration's checks of its settings together: ranges, and settings that must
agree with each other. Each value's type and allowed words are checked as it is read
(powertrip/core/configvalues.py); these need the whole configuration, so they run once it is
complete (RunConfig.validate), naming each bad setting's source where it has one."""

from __future__ import annotations

from typing import Any

from powertrip.core import footprint, outer
from powertrip.core.configvalues import FIELD_CHOICES, ConfigError
from powertrip.core.peftspec import PeftSpec, PeftSpecError
from powertrip.core.profiles import PopulationSpec, regions_problems

#: the radius and share the calibrated distances are fitted to (paper Fig. 9: 22 of 100 sites
#: within 1,000 miles); a run uses PopulationSpec's defaults
CALIBRATION_RADIUS_MILES = PopulationSpec.radius_miles
CALIBRATION_SHARE = PopulationSpec.radius_share


def check_settings(config: Any) -> None:
    """Check a RunConfig's settings together (Any: this module sits below config.py, which
    calls it); a message names the setting and, where it was read from a file, a flag,
    `--set` or a variable, that source (RunConfig.with_values). Raises ConfigError."""
    sources = config.sources()

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
        value = getattr(config, name)
        if value not in allowed:
            raise ConfigError(
                named(f"{name} must be one of {', '.join(allowed)}, got {value!r}", name)
            )
    try:
        PeftSpec.parse(config.peft)
    except PeftSpecError as exc:
        raise ConfigError(named(str(exc), "peft")) from None
    need(config.num_sites >= 1, "num_sites (--sites)", f"must be >= 1, got {config.num_sites}")
    need(config.max_rounds >= 1, "max_rounds", f"must be >= 1, got {config.max_rounds}")
    need(config.max_sim_hours >= 0, "max_sim_hours", f"must be >= 0, got {config.max_sim_hours}")
    if config.target_accuracy is not None:
        need(
            0 < config.target_accuracy <= 1,
            "target_accuracy",
            f"must be in (0, 1], got {config.target_accuracy}",
        )
    if config.target_perplexity is not None:
        need(
            config.target_perplexity == 0 or config.target_perplexity > 1,
            "target_perplexity",
            f"must be > 1 (a perplexity), 0 (none: the accuracy target) or null (the "
            f"workload's default), got {config.target_perplexity}",
        )
    if config.update_size_gb is not None:
        need(
            config.update_size_gb > 0, "update_size_gb", f"must be > 0, got {config.update_size_gb}"
        )
    need(config.comm_directions in (1, 2), "comm_directions", "must be 1 (upload) or 2 (both)")
    need(
        config.comm_directions == 1 or config.delta_encoding == "fp32",
        "delta_encoding",
        f"{config.delta_encoding} encodes the upload only, while comm_directions 2 charges the "
        "model's download at the same M; use comm_directions 1 (the paper's) or "
        "delta_encoding fp32",
        "comm_directions",
    )
    need(config.aggregation_s >= 0, "aggregation_s", f"must be >= 0, got {config.aggregation_s}")
    need(config.seed >= 0, "seed", f"must be >= 0, got {config.seed}")
    for name in ("lr", "tau_s"):
        value = getattr(config, name)
        if value is not None:
            need(value > 0, name, f"must be > 0, got {value}")
    need(
        config.tau_source != "measured" or config.tau_s is None,
        "tau_s",
        f"is {config.tau_s:g} but tau_source measured measures it at run start; unset it "
        "(tau_s=null) or use tau_source fixed"
        if config.tau_s is not None
        else "",
        "tau_source",
    )
    for name in ("batch_size", "local_steps", "eval_samples"):
        value = getattr(config, name)
        if value is not None:
            need(value >= 1, name, f"must be >= 1, got {value}")
    need(
        0 <= config.min_distance_miles <= config.max_distance_miles,
        "min_distance_miles",
        "must satisfy 0 <= min_distance_miles <= max_distance_miles",
        "max_distance_miles",
    )
    need(
        config.distance_distribution != "calibrated"
        or config.population == "regions"
        or config.min_distance_miles < CALIBRATION_RADIUS_MILES < config.max_distance_miles,
        "distance_distribution",
        f"'calibrated' places {CALIBRATION_SHARE:.0%} of the sites within "
        f"{CALIBRATION_RADIUS_MILES:g} miles, so it needs min_distance_miles < "
        f"{CALIBRATION_RADIUS_MILES:g} < max_distance_miles (got "
        f"{config.min_distance_miles:g}, {config.max_distance_miles:g}); widen the range or "
        "use 'uniform'",
        "min_distance_miles",
        "max_distance_miles",
    )
    need(
        0 < config.min_power <= 1,
        "min_power",
        f"must satisfy 0 < min_power <= max_power <= 1, got {config.min_power}",
    )
    need(
        config.min_power <= config.max_power <= 1,
        "max_power",
        f"must satisfy 0 < min_power <= max_power <= 1, got min_power={config.min_power}, "
        f"max_power={config.max_power}",
        "min_power",
    )
    need(
        config.reference_bandwidth_gbps > 0,
        "reference_bandwidth_gbps",
        f"must be > 0, got {config.reference_bandwidth_gbps}",
    )
    need(config.gpus_per_site >= 1, "gpus_per_site", f"must be >= 1, got {config.gpus_per_site}")
    need(
        0 < config.gpus_available_min_fraction <= config.gpus_available_max_fraction <= 1,
        "gpus_available_min_fraction",
        "must satisfy 0 < gpus_available_min_fraction <= gpus_available_max_fraction <= 1, "
        f"got {config.gpus_available_min_fraction}, {config.gpus_available_max_fraction}",
        "gpus_available_max_fraction",
    )
    if config.population == "regions":
        for name, why in regions_problems(config.num_sites, config.aggregator_region):
            need(False, name, why, *(["population"] if name == "num_sites" else []))
    need(config.carbon_slack >= 1, "carbon_slack", f"must be >= 1, got {config.carbon_slack}")
    need(
        config.objective != "carbon" or config.population == "regions",
        "objective",
        "carbon needs each site's grid intensity, which population 'regions' gives; set "
        "population: regions",
        "population",
    )
    need(config.workers >= 1, "workers", f"must be >= 1, got {config.workers}")
    need(config.threads_per_worker >= 1, "threads_per_worker", "must be >= 1")
    need(
        config.train_threads >= 0,
        "train_threads",
        f"must be >= 0 (0 = one per CPU core), got {config.train_threads}",
    )
    for problem in outer.outer_of(config).problems():
        name = problem.split(":")[0].split(" ")[0]
        need(False, name, problem.split(": ", 1)[1] if ": " in problem else problem)
    need(config.site_batch >= 1, "site_batch", f"must be >= 1, got {config.site_batch}")
    need(config.round_deadline_s > 0, "round_deadline_s", "must be > 0")
    for key, value in config.policy_params.items():
        need(isinstance(value, int | float), f"policy_params.{key}", "must be a number")
    try:
        footprint.spec_of(config)  # its carbon trace read: a bad file is named now
    except footprint.FootprintError as exc:
        message = str(exc)  # "carbon_trace: ...", "gpu_power_w must ..."
        raise ConfigError(named(message, message.split(":")[0].split(" ")[0])) from None

"""The run configuration's checks of its settings together: ranges, and settings that must
agree with each other. Each value's type and allowed words are checked as it is read
(powertrip/core/configvalues.py); these need the whole configuration, so they run once it is
complete (RunConfig.validate), naming each bad setting's source where it has one."""

from __future__ import annotations

from typing import Any

from powertrip.core import footprint, outer
from powertrip.core.configvalues import ConfigError
from powertrip.core.peftspec import PeftSpec, PeftSpecError
from powertrip.core.profiles import PopulationSpec, regions_problems
from powertrip.core.settings import rows

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

    for row in rows(type(config)):  # each value against its row: allowed words, range
        value = getattr(config, row.name)
        if row.choices is not None and value not in row.choices:
            allowed = ", ".join(map(str, row.choices))
            raise ConfigError(
                named(f"{row.name} must be one of {allowed}, got {value!r}", row.name)
            )
        problem = row.range_problem(value)
        name = f"{row.name} ({row.flag})" if row.flag else row.name
        need(problem is None, name, problem or "")
    try:
        PeftSpec.parse(config.peft)
    except PeftSpecError as exc:
        raise ConfigError(named(str(exc), "peft")) from None
    if config.target_perplexity is not None:
        need(
            config.target_perplexity == 0 or config.target_perplexity > 1,
            "target_perplexity",
            f"must be > 1 (a perplexity), 0 (none: the accuracy target) or null (the "
            f"workload's default), got {config.target_perplexity}",
        )
    need(
        config.comm_directions == 1 or config.delta_encoding == "fp32",
        "delta_encoding",
        f"{config.delta_encoding} encodes the upload only, while comm_directions 2 charges the "
        "model's download at the same M; use comm_directions 1 (the paper's) or "
        "delta_encoding fp32",
        "comm_directions",
    )
    need(
        config.tau_source != "measured" or config.tau_s is None,
        "tau_s",
        f"is {config.tau_s:g} but tau_source measured measures it at run start; unset it "
        "(tau_s=null) or use tau_source fixed"
        if config.tau_s is not None
        else "",
        "tau_source",
    )
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
        0 < config.gpus_available_min_fraction <= config.gpus_available_max_fraction <= 1,
        "gpus_available_min_fraction",
        "must satisfy 0 < gpus_available_min_fraction <= gpus_available_max_fraction <= 1, "
        f"got {config.gpus_available_min_fraction}, {config.gpus_available_max_fraction}",
        "gpus_available_max_fraction",
    )
    if config.population == "regions":
        for name, why in regions_problems(config.num_sites, config.aggregator_region):
            need(False, name, why, *(["population"] if name == "num_sites" else []))
    need(
        config.objective != "carbon" or config.population == "regions",
        "objective",
        "carbon needs each site's grid intensity, which population 'regions' gives; set "
        "population: regions",
        "population",
    )
    for problem in outer.outer_of(config).problems():
        name = problem.split(":")[0].split(" ")[0]
        need(False, name, problem.split(": ", 1)[1] if ": " in problem else problem)
    for key, value in config.policy_params.items():
        need(isinstance(value, int | float), f"policy_params.{key}", "must be a number")
    try:
        footprint.spec_of(config)  # its carbon trace read: a bad file is named now
    except footprint.FootprintError as exc:
        message = str(exc)  # "carbon_trace: ...", "gpu_power_w must ..."
        raise ConfigError(named(message, message.split(":")[0].split(" ")[0])) from None

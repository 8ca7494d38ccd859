"""The run directory's schema: what a run writes and what readers may rely on.

One place for the file names, the rounds.csv columns and the summary keys, so the writer
(the aggregator and the experiment drivers) and the readers (report, compare's and
reproduce's resumption) cannot drift apart. tests/unit/test_runfiles.py checks the
aggregator's RoundRow and summary against it.

A run directory holds:
  config.yaml       the run's configuration, resolved (workload defaults filled in), written
                    by the aggregator; what a report reads
  run-config.yaml   the configuration as requested, written by the driver (run, compare,
                    sweep, reproduce) before the services start; what --resume and the
                    resumption checks compare against (resolving it again gives config.yaml)
  rounds.csv        one row per round (ROUND_COLUMNS), seeded: byte-identical across reruns
  decisions.jsonl   the policy's decision and explanation per round
  wall.csv          wall-clock timings per round and phase (WALL_COLUMNS; not
                    reproducible, hence apart)
  summary.json      the run's outcome (SUMMARY_KEYS at least)
  checkpoint/       the last committed round (model and loop state), for --resume
  logs/             one log file per service process
"""

from __future__ import annotations

from powertrip.core.clocks import clock_kind

CONFIG = "config.yaml"
REQUESTED_CONFIG = "run-config.yaml"
ROUNDS = "rounds.csv"
DECISIONS = "decisions.jsonl"
WALL = "wall.csv"
SUMMARY = "summary.json"
#: a reproduction's seed folder keeps its runs' shared site table once, here, and their
#: summary.json files without it (powertrip/app/experiments/sitetables.py)
SHARED_SITES = "sites.json"
CHECKPOINT_DIR = "checkpoint"
LOGS_DIR = "logs"
#: a report reads the first of these that exists (older runs may lack config.yaml)
CONFIG_FILES = (CONFIG, REQUESTED_CONFIG)

#: rounds.csv columns on the simulated clock, in file order
ROUND_COLUMNS: tuple[str, ...] = (
    "round",
    "sim_time_s",
    "round_time_s",
    "k",
    "sites",
    "accuracy",
    "loss",
    "compute_s",
    "comm_s",
    "wait_s",
    "aggregation_s",
    "predicted_round_time_s",
    "bytes_up",
    "bytes_down",
    "emulated_bytes",
    "straggler",
    "mode",
    "train_loss",
    "clock",
)
#: columns only the wall clock writes, after ROUND_COLUMNS: on the simulated clock the
#: model's round time *is* round_time_s, and leaving them out keeps simulated files as they
#: were before the column existed
WALL_ONLY_COLUMNS: tuple[str, ...] = ("model_round_time_s",)
#: energy, egress cost and carbon of the round's selected sites (powertrip/core/footprint.py):
#: joules (active + idle), of which idle, GB over the sites' links, US$ of egress, g CO2.
#: Last in every file (after the wall clock's column too), so that files of earlier runs
#: are these files' prefix
FOOTPRINT_COLUMNS: tuple[str, ...] = (
    "energy_j",
    "idle_energy_j",
    "egress_gb",
    "egress_usd",
    "carbon_g",
)
#: columns added after the first runs were written: a reader may not require them
LATER_ROUND_COLUMNS = frozenset(
    {"aggregation_s", "emulated_bytes", "straggler", "mode", "train_loss", "clock"}
) | frozenset(FOOTPRINT_COLUMNS)
#: the columns a reader may require, in file order
REQUIRED_ROUND_COLUMNS: tuple[str, ...] = tuple(
    c for c in ROUND_COLUMNS if c not in LATER_ROUND_COLUMNS
)
#: wall.csv columns, in file order: real seconds of each round's parts (not reproducible,
#: hence not in rounds.csv). wall_train_s runs from the round's start until the last delta
#: is in (profiles, selection and dispatch included) and wall_round_s until the new model is
#: installed, as they always have; the phases after wall_eval_s came later (a reader may not
#: require them). wall_record_s covers the files, metrics and checkpoint written after it.
WALL_COLUMNS: tuple[str, ...] = (
    "round",
    "wall_round_s",
    "wall_train_s",
    "wall_eval_s",
    "wall_profiles_s",
    "wall_select_s",
    "wall_dispatch_s",
    "wall_collect_s",
    "wall_aggregate_s",
    "wall_record_s",
)
LATER_WALL_COLUMNS = frozenset(WALL_COLUMNS[4:])
#: the phases outside training (their sum is a round's overhead): everything but waiting
#: for the sites' deltas (wall_collect_s) and evaluating the new model (wall_eval_s)
WALL_OVERHEAD_COLUMNS: tuple[str, ...] = (
    "wall_profiles_s",
    "wall_select_s",
    "wall_dispatch_s",
    "wall_aggregate_s",
    "wall_record_s",
)
#: summary.json keys every finished or failed run has
SUMMARY_KEYS: tuple[str, ...] = (
    "policy",
    "workload",
    "clock",
    "rounds",
    "target_accuracy",
    "final_accuracy",
    "best_accuracy",
    "time_to_target_s",
    "sim_time_s",
    "stopped_reason",
)
#: summary.json keys of the footprint, written since it exists (a reader may not require
#: them): run totals, the same up to the round that reached the target (None when none
#: did), and the settings that priced them under "footprint"
FOOTPRINT_SUMMARY_KEYS: tuple[str, ...] = (
    "energy_kwh",
    "idle_energy_kwh",
    "egress_gb",
    "egress_usd",
    "carbon_kg",
    "energy_to_target_kwh",
    "egress_usd_to_target",
    "carbon_kg_to_target",
    "footprint",
)


def round_columns(clock: str) -> list[str]:
    """rounds.csv columns, in file order, of a run on `clock`."""
    wall = WALL_ONLY_COLUMNS if clock_kind(clock).measured else ()
    return [*ROUND_COLUMNS, *wall, *FOOTPRINT_COLUMNS]

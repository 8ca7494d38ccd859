"""The two clocks a run can keep, as data: their names and how files and reports word them.

Why a module of its own: the aggregator's clock objects (`services/aggregator/clock.py`) own
what each clock *does* (plan, budget check, measuring); the run-directory schema, the reports
and the CLI only need what each clock is *called* and which columns it writes. Keeping both in
one table here means no caller compares the setting with a string to find out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClockKind:
    """One value of the run setting `clock`."""

    #: the setting's value, as rounds.csv's `clock` column and summary.json write it
    name: str
    #: an adjective for lines like "bound by the simulated time budget"
    adjective: str
    #: the configuration table's wording
    text: str
    #: summary.json's clock_note
    summary_note: str
    #: the single-run report's note on how to read its times ('' for none)
    report_note: str
    #: whether rounds are measured (the wall clock records the model's time beside them)
    measured: bool


SIMULATED = ClockKind(
    name="simulated",
    adjective="simulated",
    text="simulated clock: time from the model, real training",
    summary_note="simulated clock: real training and accuracy, time from the model",
    report_note=(
        "Times are on the simulated clock: training and accuracy are real, the time each "
        "round takes comes from the paper's time model."
    ),
    measured=False,
)
WALL = ClockKind(
    name="wall",
    adjective="wall-clock",
    text="wall clock",
    summary_note=(
        "wall clock: round times and their compute/comm/wait/aggregation breakdown "
        "are measured; predicted_round_time_s is empty because the policy predicts "
        "in the time model's seconds, which model_round_time_s records"
    ),
    report_note="",
    measured=True,
)

#: every clock by its setting's value, in the order `--help` and errors list them
CLOCK_KINDS: dict[str, ClockKind] = {k.name: k for k in (SIMULATED, WALL)}
CLOCKS: tuple[str, ...] = tuple(CLOCK_KINDS)


def clock_kind(name: str | None) -> ClockKind:
    """The clock called `name`; a run directory without one (written before the wall clock
    existed) was simulated. An unknown name is refused: configs are checked on reading, so
    one here is a damaged file."""
    if not name:
        return SIMULATED
    try:
        return CLOCK_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown clock {name!r}; allowed: {', '.join(CLOCKS)}") from None

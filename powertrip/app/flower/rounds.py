"""What the strategy keeps of each round, and where it writes it: `decisions.jsonl` (one line
a round: what the policy saw, chose and why, and what came of it) and `rounds.csv` (a
time-to-accuracy curve in the services' column names), in a directory of their own that
no later run overwrites."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from powertrip.app.flower.profiles import SiteProfile
from powertrip.core.policies import PastRound

DECISIONS = "decisions.jsonl"
ROUNDS = "rounds.csv"


@dataclass
class RoundLog:
    """One round as the strategy saw it: what the policy decided and what came of it."""

    round: int
    site_ids: list[str]  # the chosen sites, in the policy's rank order
    node_ids: list[int]
    predicted_round_time_s: float
    explanation: dict
    reason: str = ""  # the policy's one-line reason, and any bound fraction_train etc. set
    round_time_s: float = math.nan
    sim_time_s: float = math.nan  # cumulative, on the strategy's clock
    accuracy: float = math.nan
    delivered: int = 0
    profiles: list[SiteProfile] = field(default_factory=list)  # what the policy saw
    #: nodes left out of this round before the policy saw them: node id -> why
    dropped: dict[int, str] = field(default_factory=dict)
    #: each chosen site's own time on the time model, in rank order (`site_times_s`)
    site_time_s: list[float] = field(default_factory=list)
    #: the policy's own estimate of the round time (its estimator's; predicted_round_time_s
    #: is the time model's charge of the chosen sites)
    policy_estimate_s: float = math.nan
    #: the outer step applied after the average: optimizer, lr, momentum
    outer_step: dict = field(default_factory=dict)
    # what each site that delivered reported (the services' RoundRecord; Oort reads them)
    reported_site_ids: list[str] = field(default_factory=list)
    site_train_loss: list[float] = field(default_factory=list)
    site_num_samples: list[int] = field(default_factory=list)
    site_duration_s: list[float] = field(default_factory=list)

    def past_round(self) -> PastRound:
        return PastRound(
            round=self.round,
            k=len(self.site_ids),
            accuracy=0.0 if math.isnan(self.accuracy) else self.accuracy,
            round_time_s=self.round_time_s,
            site_ids=tuple(self.site_ids),
            reported_site_ids=tuple(self.reported_site_ids),
            site_train_loss=tuple(self.site_train_loss),
            site_num_samples=tuple(self.site_num_samples),
            site_duration_s=tuple(self.site_duration_s),
        )

    def to_json(self) -> str:
        """One decisions.jsonl line: every field, k beside it, NaN as null (strict JSON)."""
        values = dataclasses.asdict(self)
        values["k"] = len(self.site_ids)
        values["dropped"] = {str(node): why for node, why in self.dropped.items()}
        return json.dumps(_plain(values), allow_nan=False, sort_keys=True)


def _plain(value: object) -> object:
    """JSON's types for what a policy's explanation may hold (numpy scalars and arrays),
    and None for a float that is not finite."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunOutput:
    """A run's directory: made when the run starts, refused if an earlier run's files are
    in it (a run never overwrites another's decisions silently)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser().resolve()
        self.written = 0  # rounds already in decisions.jsonl

    def open(self) -> RunOutput:
        taken = [n for n in (DECISIONS, ROUNDS) if (self.directory / n).exists()]
        if taken:
            raise FileExistsError(
                f"{self.directory} already holds {' and '.join(taken)} of an earlier run; "
                "name another output directory (out_dir, run config `out-dir`), or move "
                "those files away"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / DECISIONS).touch()
        return self

    def write(self, rounds: list[RoundLog]) -> None:
        """Append the rounds not yet written to decisions.jsonl; rewrite rounds.csv."""
        with (self.directory / DECISIONS).open("a") as out:
            for log in rounds[self.written :]:
                out.write(log.to_json() + "\n")
        self.written = len(rounds)
        write_rounds_csv(rounds, self.directory / ROUNDS)


def write_rounds_csv(rounds: list[RoundLog], path: str | Path) -> Path:
    """rounds.csv in the services' column names (round, k, sites, round_time_s,
    sim_time_s, accuracy, predicted_round_time_s, delivered) and the outer step's: a
    time-to-accuracy curve."""
    path = Path(path)
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["round", "k", "sites", "round_time_s", "sim_time_s", "accuracy",
                         "predicted_round_time_s", "delivered", "outer_optimizer",
                         "outer_lr", "outer_momentum"])  # fmt: skip
        for r in rounds:
            outer = r.outer_step or {}
            writer.writerow([r.round, len(r.site_ids), ";".join(r.site_ids),
                             f"{r.round_time_s:.6f}", f"{r.sim_time_s:.6f}",
                             f"{r.accuracy:.6f}", f"{r.predicted_round_time_s:.6f}",
                             r.delivered, outer.get("optimizer", ""), outer.get("lr", ""),
                             outer.get("momentum", "")])  # fmt: skip
    return path


def read_decisions(path: str | Path) -> list[dict]:
    """decisions.jsonl's rounds, each with `history`: the rounds before it as the policy
    had them (PastRound's fields; a missing accuracy read as 0, as the policy reads it), so
    a decision can be replayed against the policy service."""
    rounds = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    names = [f.name for f in dataclasses.fields(PastRound)]
    past = []
    for r in rounds:
        r["history"] = list(past)
        past.append({n: r[n] for n in names} | {"accuracy": r["accuracy"] or 0.0})
    return rounds

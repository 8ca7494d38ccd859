"""The run's outcome so far: what the summary reports and what a checkpoint carries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from powertrip.core.footprint import FootprintTotals, RoundFootprint


@dataclass(frozen=True)
class RoundRecord:
    """One finished round as the policy sees it in later rounds' history (paper Eq. 5):
    the values of a common.v1 RoundRecord (control_client.py sends it as one). What each
    site that delivered reported are parallel tuples, in site_ids order; empty in records
    from before they existed."""

    round: int = 0
    k: int = 0
    accuracy: float = 0.0
    round_time_s: float = 0.0
    predicted_round_time_s: float = 0.0
    sim_time_s: float = 0.0
    site_ids: tuple[str, ...] = ()
    reported_site_ids: tuple[str, ...] = ()
    site_train_loss: tuple[float, ...] = ()
    site_num_samples: tuple[int, ...] = ()
    site_duration_s: tuple[float, ...] = ()

    @classmethod
    def of(cls, **values) -> RoundRecord:
        """A record of `values` held as the message holds them: numbers as Python ints
        and floats (an int given for a double reads back as a float), lists as tuples."""
        out = {}
        for name, value in values.items():
            kind = _KINDS[name]
            if kind is str:
                out[name] = tuple(str(v) for v in value)
            elif isinstance(kind, tuple):
                out[name] = tuple(kind[0](v) for v in value)
            else:
                out[name] = kind(value)
        return cls(**out)


_KINDS = {
    "round": int, "k": int, "accuracy": float, "round_time_s": float,
    "predicted_round_time_s": float, "sim_time_s": float, "site_ids": str,
    "reported_site_ids": str, "site_train_loss": (float,), "site_num_samples": (int,),
    "site_duration_s": (float,),
}  # fmt: skip


@dataclass
class LoopResult:
    rounds: int = 0
    sim_time_s: float = 0.0
    accuracy: float = 0.0
    best_accuracy: float = 0.0
    time_to_target_s: float | None = None
    stopped_reason: str = ""
    history: list[RoundRecord] = field(default_factory=list)
    #: energy, egress and carbon so far; None when unknown (resumed from a checkpoint
    #: written before the accounting existed, whose rounds were not counted)
    footprint: FootprintTotals | None = field(default_factory=FootprintTotals)
    #: the totals when the target was reached (summary units), None before
    footprint_at_target: dict[str, float] | None = None
    #: per round, the mean relative error of the accepted deltas' encoding (empty for fp32)
    encoding_errors: list[float] = field(default_factory=list)

    def book(self, footprint: RoundFootprint, encoding_error: Mapping[str, float]) -> None:
        """Add a round to the run's totals: its footprint, and the mean of its accepted
        deltas' encoding errors (none for fp32, whose sites report none)."""
        if self.footprint is not None:
            self.footprint.add(footprint)
        if any(encoding_error.values()):
            self.encoding_errors.append(
                float(np.mean([encoding_error[s] for s in sorted(encoding_error)]))
            )

    def to_json(self) -> dict:
        """Everything the next round depends on; floats survive JSON exactly (repr)."""
        return {
            "rounds": self.rounds,
            "sim_time_s": self.sim_time_s,
            "accuracy": self.accuracy,
            "best_accuracy": self.best_accuracy,
            "time_to_target_s": self.time_to_target_s,
            "stopped_reason": self.stopped_reason,
            "history": [
                {
                    "round": h.round,
                    "k": h.k,
                    "accuracy": h.accuracy,
                    "round_time_s": h.round_time_s,
                    "predicted_round_time_s": h.predicted_round_time_s,
                    "sim_time_s": h.sim_time_s,
                    "site_ids": list(h.site_ids),
                    "reported_site_ids": list(h.reported_site_ids),
                    "site_train_loss": list(h.site_train_loss),
                    "site_num_samples": list(h.site_num_samples),
                    "site_duration_s": list(h.site_duration_s),
                }
                for h in self.history
            ],
            "footprint": None if self.footprint is None else self.footprint.to_json(),
            "footprint_at_target": self.footprint_at_target,
            "encoding_errors": list(self.encoding_errors),
        }

    @classmethod
    def from_json(cls, data: dict) -> LoopResult:
        return cls(
            rounds=int(data["rounds"]),
            sim_time_s=float(data["sim_time_s"]),
            accuracy=float(data["accuracy"]),
            best_accuracy=float(data["best_accuracy"]),
            time_to_target_s=data["time_to_target_s"],
            stopped_reason=str(data["stopped_reason"]),
            history=[RoundRecord.of(**h) for h in data["history"]],
            footprint=(
                FootprintTotals.from_json(data["footprint"]) if data.get("footprint") else None
            ),
            footprint_at_target=data.get("footprint_at_target"),
            encoding_errors=[float(e) for e in data.get("encoding_errors", [])],
        )


@dataclass
class CheckpointRecord:
    """Everything a run continues from after a crash: one record that each owner of loop
    state fills in and restores from, so no one gathers the pieces by hand. The round loop
    gives the round, the model and the result; `AggregatorState.checkpoint_into` the dead
    sites; `ControlClient.checkpoint_into` its last good replies. `CheckpointStore` writes
    and reads the record."""

    round: int  # the last round in it
    model_version: int
    weights: dict[str, np.ndarray]
    result: LoopResult
    dead_sites: list[str] = field(default_factory=list)
    #: the control client's last good replies, as the bytes of their messages: a Selection
    #: (without its shadow decisions), a SiteColumns, and in checkpoints written before the
    #: profiles' file the profiler's GetProfilesResponse
    last_selection: bytes | None = None
    last_profiles: bytes | None = None
    last_profiles_reply: bytes | None = None
    #: the outer optimizer's momentum buffer after `round` (powertrip/core/outer.py; None for
    #: fedavg)
    outer_buffer: dict[str, np.ndarray] | None = None

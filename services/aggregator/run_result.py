"""The run's outcome so far: what the summary reports and what a checkpoint carries."""

from __future__ import annotations

from dataclasses import dataclass, field

from powertrip.v1 import common_pb2


@dataclass
class LoopResult:
    rounds: int = 0
    sim_time_s: float = 0.0
    accuracy: float = 0.0
    best_accuracy: float = 0.0
    time_to_target_s: float | None = None
    stopped_reason: str = ""
    history: list[common_pb2.RoundRecord] = field(default_factory=list)

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
                }
                for h in self.history
            ],
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
            history=[common_pb2.RoundRecord(**h) for h in data["history"]],
        )

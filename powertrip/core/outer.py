"""The outer step: how the round's averaged delta moves the global model.

FedAvg adds the weighted average of the sites' deltas to the model: an outer step with
learning rate 1 and no momentum (paper Eq. 2). DiLoCo (Douillard et al., 2023,
arXiv:2311.08105) and its open reproduction OpenDiLoCo (arXiv:2407.07852) treat the
averaged delta as a pseudo-gradient g = -delta and take an SGD step with Nesterov momentum
on it; OpenDiLoCo's values are lr 0.7 and momentum 0.9. With the buffer b (zero at the
start), in delta terms (torch.optim.SGD(nesterov=True)'s update with g = -delta):

    b_t = mu * b_{t-1} + delta_t
    w_{t+1} = w_t + lr * (delta_t + mu * b_t)

FedAvgM (Hsu et al., 2019, arXiv:1909.06335), FedAvg with server momentum, is the tuned
FedAvg baseline: the same buffer, a heavy-ball step on it (no look-ahead),

    b_t = mu * b_{t-1} + delta_t
    w_{t+1} = w_t + lr * b_t

so with lr 1 and momentum 0 it is FedAvg to the bit. "fedavg" is w + delta exactly (as
`fedavg.apply_delta`), with no buffer. Tensors that are not floating point (counters) are
added as FedAvg adds them. The buffer (nesterov's and fedavgm's) is part of a run's state:
the checkpoint carries it (so kill and --resume continue to the same bytes) and the audit
trail replays it (so `powertrip audit` still recomputes the model).

Every operation is one numpy ufunc on the model's own dtype: each element rounds the same
way on any CPU, so a run repeats byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: "fedavg": w + delta (the paper's method); "nesterov": DiLoCo's outer SGD with momentum;
#: "fedavgm": FedAvg with server (heavy-ball) momentum
OUTER_OPTIMIZERS = ("fedavg", "nesterov", "fedavgm")
#: the optimizers that keep a momentum buffer and read `outer_lr` and `outer_momentum`
WITH_MOMENTUM = ("nesterov", "fedavgm")
#: OpenDiLoCo's outer learning rate and momentum (arXiv:2407.07852, §3)
OUTER_LR = 0.7
OUTER_MOMENTUM = 0.9

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class OuterStep:
    """The outer optimizer of a run (RunConfig's `outer_optimizer`, `outer_lr`,
    `outer_momentum`; the last two apply to `WITH_MOMENTUM`'s, nesterov and fedavgm). The
    optimizer has no default here: RunConfig's is the product's, and a stored run's is
    `STORED`."""

    optimizer: str
    lr: float = OUTER_LR
    momentum: float = OUTER_MOMENTUM

    def problems(self) -> list[str]:
        """'field: why' for every bad setting (empty when all are valid)."""
        out = []
        if self.optimizer not in OUTER_OPTIMIZERS:
            out.append(
                f"outer_optimizer must be one of {', '.join(OUTER_OPTIMIZERS)}, "
                f"got {self.optimizer!r}"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            out.append(f"outer_lr: must be > 0, got {self.lr}")
        if not (math.isfinite(self.momentum) and 0 <= self.momentum < 1):
            out.append(f"outer_momentum: must be in [0, 1), got {self.momentum}")
        return out

    @property
    def has_state(self) -> bool:
        """Whether the step carries a buffer from round to round."""
        return self.optimizer in WITH_MOMENTUM

    def to_json(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "lr": self.lr, "momentum": self.momentum}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OuterStep:
        return cls(str(data["optimizer"]), float(data["lr"]), float(data["momentum"]))


#: the outer step of a run made before runs had one (no outer setting, no outer.json in its
#: audit): FedAvg's average, as every run then took it
STORED = OuterStep("fedavg")


def outer_of(settings: Any) -> OuterStep:
    """The OuterStep of an object with RunConfig's outer settings (`STORED`'s where it has
    none)."""
    return OuterStep(
        str(getattr(settings, "outer_optimizer", STORED.optimizer)),
        float(getattr(settings, "outer_lr", OUTER_LR)),
        float(getattr(settings, "outer_momentum", OUTER_MOMENTUM)),
    )


def outer_update(
    weights: Arrays, delta: Arrays, buffer: Arrays | None, step: OuterStep
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """(the next model, the next buffer) from the round's averaged `delta`.

    `buffer` is the previous round's (None before the first round, or for fedavg, which
    keeps none). nesterov and fedavgm share the buffer; nesterov steps by
    lr * (delta + mu * b), fedavgm by lr * b."""
    if not step.has_state:  # fedavg.apply_delta's sum; not imported: fedavg needs torch,
        # and the policy and profiler images, which read this module through RunConfig, have none
        return {k: w + delta[k].astype(w.dtype, copy=False) for k, w in weights.items()}, None
    new_weights: dict[str, np.ndarray] = {}
    new_buffer: dict[str, np.ndarray] = {}
    for key, w in weights.items():
        d = np.asarray(delta[key]).astype(w.dtype, copy=False)
        if not np.issubdtype(w.dtype, np.floating):  # counters: added as FedAvg adds them
            new_weights[key] = w + d
            continue
        if buffer is None:
            b = d.copy()
        else:
            b = np.multiply(buffer[key], w.dtype.type(step.momentum), dtype=w.dtype)
            b = np.add(b, d, dtype=w.dtype)
        if step.optimizer == "nesterov":
            move = np.add(d, np.multiply(b, w.dtype.type(step.momentum), dtype=w.dtype))
        else:  # fedavgm: heavy ball, the buffer itself
            move = b
        new_weights[key] = np.add(
            w, np.multiply(move, w.dtype.type(step.lr), dtype=w.dtype), dtype=w.dtype
        )
        new_buffer[key] = b
    return new_weights, new_buffer

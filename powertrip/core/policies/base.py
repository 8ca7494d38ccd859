"""The one small interface every site-selection policy implements.

A policy sees a `Context` (the site table, the accuracy history, the emulated update size
and the modelled local work) and returns a `Decision`: site indices in rank order, the
predicted round time and a machine-readable explanation. Policies are pure: same context,
same decision; randomness comes only from (seed, round). Like a Flower strategy, a policy
holds no per-run state: everything it needs travels in the context, so one policy service
can serve many runs at once and a restarted service decides exactly as before.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from powertrip.core.policies.params import PolicyError, PolicyParams, param
from powertrip.core.policies.params import param_number as param_number
from powertrip.core.timemodel import prefix_round_time_estimates, site_comm_s

FEDERATED = "federated"
CENTRALIZED = "centralized"
ESTIMATORS = ("paper", "clock")
#: fraction of the alive sites an unset `k` means for the fixed-k baselines
DEFAULT_K_FRACTION = 0.3


def _as_column(name: str, values: Sequence[float], n: int) -> np.ndarray:
    column = np.asarray(values, dtype=np.float64)
    if column.shape != (n,):
        raise PolicyError(f"{name}: expected {n} values, got shape {column.shape}")
    if not np.isfinite(column).all():
        raise PolicyError(f"{name} must be finite for every site")
    return column


@dataclass(frozen=True)
class SiteTable:
    """Column view of the sites, so every score is one vectorised numpy expression.

    `comm_s` (directions x (latency + M/B), paper Eq. 3) is computed once here because every
    policy and every shadow needs it. `by_id` breaks ties by site id, independent of the
    order the sites arrived in, so a decision does not depend on how the caller sorted them.
    """

    ids: np.ndarray  # str, as given
    power: np.ndarray  # p_i(t) in [0, 1]
    distance_miles: np.ndarray
    latency_s: np.ndarray  # one-way propagation delay used (configured or measured)
    bandwidth_bytes_per_s: np.ndarray  # used (configured or measured)
    transfer_s: np.ndarray  # M / B, Eq. 3's transfer part (latency_s is its propagation part)
    comm_s: np.ndarray  # directions * (latency + M / B)
    alive: np.ndarray  # bool; dead or zero-power sites are never selected
    by_id: np.ndarray  # site indices in id order: stable sorts of it tie-break by id
    alive_by_id: np.ndarray  # the alive ones of by_id, still in id order
    #: each site's grid carbon intensity (g CO2/kWh), None when the profiles carry none
    carbon_g_per_kwh: np.ndarray | None = None
    # rankings computed once per table (see `memo`); not part of the table's value
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def num_alive(self) -> int:
        return int(np.count_nonzero(self.alive))

    def memo(self, key: Hashable, compute: Callable[[], tuple[np.ndarray, ...]]):
        """`compute()` once per table and key, its arrays made read-only.

        The chosen policy and its shadows share one table, and most of them rank the sites
        by the same scores: at 10,000 sites each ranking is a sort worth saving."""
        if key not in self._memo:
            arrays = compute()
            for array in arrays:
                array.flags.writeable = False
            self._memo[key] = arrays
        return self._memo[key]

    def rows_of(self, site_ids: Sequence[str]) -> np.ndarray:
        """The row of each of `site_ids`, -1 for an id not in the table: a binary search
        over the ids in id order (a dict of every id cost 5 ms a call at 10,000 sites)."""
        (in_order,) = self.memo("ids_in_order", lambda: (self.ids[self.by_id],))
        wanted = np.asarray(site_ids, dtype=str)
        if wanted.size == 0:
            return np.zeros(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(in_order, wanted), len(in_order) - 1)
        return np.where(in_order[at] == wanted, self.by_id[at], -1).astype(np.int64)

    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        power: Sequence[float],
        distance_miles: Sequence[float],
        latency_s: Sequence[float],
        bandwidth_bytes_per_s: Sequence[float],
        update_size_bytes: float,
        directions: int = 2,
        alive: Sequence[bool] | None = None,
        carbon_g_per_kwh: Sequence[float] | None = None,
    ) -> SiteTable:
        n = len(ids)
        if n == 0:
            raise PolicyError("no sites to choose from")
        id_arr = np.asarray(ids, dtype=str)
        if (id_arr[1:] > id_arr[:-1]).all():
            # already in strictly increasing id order (what the profiler sends): no sort,
            # and no duplicates
            sorted_idx = np.arange(n)
        else:
            sorted_idx = np.argsort(id_arr, kind="stable")
            dup = id_arr[sorted_idx][1:] == id_arr[sorted_idx][:-1]
            if dup.any():
                raise PolicyError(f"duplicate site id {id_arr[sorted_idx][1:][dup][0]!r}")
        power_arr = _as_column("power_fraction", power, n)
        if ((power_arr < 0) | (power_arr > 1)).any():
            bad = ids[int(np.argmax((power_arr < 0) | (power_arr > 1)))]
            raise PolicyError(f"site {bad}: power_fraction must be in [0, 1]")
        bandwidth = _as_column("bandwidth_bytes_per_s", bandwidth_bytes_per_s, n)
        if (bandwidth <= 0).any():
            bad = ids[int(np.argmax(bandwidth <= 0))]
            raise PolicyError(f"site {bad}: bandwidth_bytes_per_s must be > 0")
        latency = _as_column("latency_s", latency_s, n)
        if (latency < 0).any():
            raise PolicyError(f"site {ids[int(np.argmax(latency < 0))]}: latency_s must be >= 0")
        distance = _as_column("distance_miles", distance_miles, n)
        if update_size_bytes < 0 or not math.isfinite(update_size_bytes):
            raise PolicyError(f"update_size_bytes must be finite and >= 0, got {update_size_bytes}")
        alive_arr = np.ones(n, dtype=bool) if alive is None else np.asarray(alive, dtype=bool)
        if alive_arr.shape != (n,):
            raise PolicyError(f"alive: expected {n} values, got shape {alive_arr.shape}")
        # a site at zero power would take forever (tau / 0): treat it as unavailable
        alive_arr = alive_arr & (power_arr > 0)
        transfer, comm = site_comm_s(latency, bandwidth, update_size_bytes, max(1, int(directions)))
        carbon = None
        if carbon_g_per_kwh is not None and len(carbon_g_per_kwh):
            carbon = _as_column("carbon_g_per_kwh", carbon_g_per_kwh, n)
            if (carbon < 0).any():
                bad = ids[int(np.argmax(carbon < 0))]
                raise PolicyError(f"site {bad}: carbon_g_per_kwh must be >= 0")
        return cls(
            ids=id_arr,
            power=power_arr,
            distance_miles=distance,
            latency_s=latency,
            bandwidth_bytes_per_s=bandwidth,
            transfer_s=transfer,
            comm_s=comm,
            alive=alive_arr,
            by_id=sorted_idx,
            alive_by_id=sorted_idx[alive_arr[sorted_idx]],
            carbon_g_per_kwh=carbon,
        )


@dataclass(frozen=True)
class PastRound:
    """One finished round as the policy sees it: its only feedback signal (paper Eq. 5)."""

    round: int
    k: int
    accuracy: float
    round_time_s: float
    #: the sites that trained, in rank order (empty from callers that do not send them)
    site_ids: tuple[str, ...] = ()
    #: what each site that delivered reported (RoundRecord): parallel tuples, empty from
    #: callers that do not send them; utility-based selection (oort) reads them
    reported_site_ids: tuple[str, ...] = ()
    site_train_loss: tuple[float, ...] = ()
    site_num_samples: tuple[int, ...] = ()
    site_duration_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class Context:
    """Everything one decision may depend on; nothing else (no hidden state)."""

    table: SiteTable
    update_size_bytes: float
    tau_s: float
    history: tuple[PastRound, ...] = ()
    #: the run's target (inf = none); the aggregator stops, a policy only says it was met
    target_accuracy: float = math.inf
    seed: int = 0
    round: int = 1
    estimator: str = "paper"
    #: the policy's parameters as the wire carries them (unset: the policy's defaults)
    params: Mapping[str, float | None] = field(default_factory=dict)
    #: the clock's work model, so T-hat is in the clock's terms (powertrip.core.timemodel)
    work_model: str = "local-steps"

    def round_time_estimates(self, ranked: np.ndarray) -> np.ndarray:
        """T-hat(k) for k = 1..len(ranked) over these sites in this order."""
        t = self.table
        return prefix_round_time_estimates(
            self.tau_s, t.power[ranked], t.comm_s[ranked], self.estimator, self.work_model
        )


@dataclass
class Decision:
    order: np.ndarray  # indices into the table, rank order
    predicted_round_time_s: float
    explanation: dict
    mode: str = FEDERATED
    power_cap: float = 0.0

    @property
    def k(self) -> int:
        return int(len(self.order))


class Policy(ABC):
    """Subclasses set `name`, `summary`, `Params` and implement `select`."""

    name: ClassVar[str]
    summary: ClassVar[str]
    #: what `powertrip policies` prints under the summary: which k or site the policy uses,
    #: and every choice the paper leaves open that the policy makes
    details: ClassVar[str] = ""
    #: the policy's parameters: a frozen dataclass declared beside it (params.py)
    Params: ClassVar[type[PolicyParams]] = PolicyParams
    #: the round-time estimator the policy is built on, whatever the request's; None: the
    #: request's (`Context.estimator`)
    estimator: ClassVar[str | None] = None
    #: whether it trains one site on pooled data (centralized.py) rather than a federation
    centralized: ClassVar[bool] = False

    def __init__(self, overrides: Mapping[str, float | None] | None = None):
        """`overrides` of the declared defaults, checked here (`Params.parse`): a policy
        with a bad parameter is never built."""
        self.defaults = self.Params.parse(self.name, overrides or {})

    def applies_to(self, table: SiteTable) -> bool:
        """Whether these profiles carry what the policy ranks by (every policy but the
        carbon-aware ones: any); a shadow that does not apply is left out."""
        return True

    def check_params(self, given: Mapping[str, float | None]) -> PolicyParams:
        """The policy's defaults (with the constructor's overrides) and `given`, each
        checked: an unknown name or a value out of its range is a PolicyError naming the
        policy, the parameter and what is allowed. Needs no sites, so a caller can check
        before any exist."""
        return self.Params.parse(self.name, given, base=self.defaults)

    def params(self, ctx: Context) -> Any:
        """The request's parameters checked (`check_params`), as the policy's `Params`, and
        the context fit to decide."""
        merged = self.check_params(ctx.params)
        if not ctx.table.alive.any():
            raise PolicyError(
                f"no alive site to select from ({len(ctx.table)} site(s), all dead or at "
                "zero power)"
            )
        if ctx.estimator not in ESTIMATORS:
            raise PolicyError(f"estimator {ctx.estimator!r} is not one of {', '.join(ESTIMATORS)}")
        return merged

    @abstractmethod
    def select(self, ctx: Context) -> Decision: ...


def predicted_time(ctx: Context, order: np.ndarray) -> float:
    """T-hat at k = len(order), over the chosen sites in rank order (the request's estimator)."""
    return float(ctx.round_time_estimates(order)[-1])


def small_k0(num_alive: int, share: float) -> int:
    """A 'small number' of starting sites: max(2, share of the alive sites), never more
    than there are (each policy that starts small names its share)."""
    return min(num_alive, max(2, round(share * num_alive)))


def default_k(k: int | None, num_alive: int, fraction: float = DEFAULT_K_FRACTION) -> int:
    """An unset k means 'a fixed fraction of the alive sites' (at least 1); else k clamped
    to 1..N."""
    if k is None:
        return max(1, min(num_alive, round(fraction * num_alive)))
    return int(min(max(1, k), num_alive))


def k_param(none: str = "30 % of the alive sites") -> Any:
    """The `k` parameter of the policies that take a fixed k, the same range everywhere."""
    return param(None, "sites selected each round", whole=True, at_least=1, none=none)


def rounded(values: np.ndarray, digits: int = 6) -> list[float]:
    """Short JSON numbers for explanations (they are for people and logs, not for maths)."""
    return [float(f"{float(x):.{digits}g}") for x in values]


#: above this many candidates an explanation lists a sample around the pick, not all
EXPLAIN_MAX_CANDIDATES = 41


def explain_rows(
    candidates: np.ndarray, gains: np.ndarray, times: np.ndarray, eff: np.ndarray, pick: int
) -> dict:
    """Candidate table for an explanation; a sample around the pick when it is long."""
    rows = np.arange(len(candidates))
    if len(rows) > EXPLAIN_MAX_CANDIDATES:
        half = EXPLAIN_MAX_CANDIDATES // 4
        keep = {0, len(rows) - 1, *range(max(0, pick - half), min(len(rows), pick + half + 1))}
        rows = np.array(sorted(keep))
    return {
        "candidates": candidates[rows].tolist(),
        "gains": rounded(gains[rows]),
        "times": rounded(times[rows]),
        "efficiencies": rounded(eff[rows]),
        "candidates_range": [int(candidates[0]), int(candidates[-1])],
    }

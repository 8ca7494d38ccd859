"""What a suite of runs asks for, as data: set-ups (variants), policies (arms) and runs.

Whoever declares suites (the paper's reproduction, in `reproduction/`) hands them to the
planner and executor (plan.py, execution.py) as a `Registry`, so those import no suite of
their own and the library never imports the reproduction.

Arm specs a suite may name:

* a policy name (`powertrip`, `random`, ...): one run of that policy;
* `sweep`: static k over the sweep grid (`SWEEP_FRACTIONS` of the sites, or `--k`);
* `static-k*`: the sweep arm with the lowest mean time to target; pulls the sweep in;
* `static-k@F`: static with k = F x sites (F a fraction, e.g. `static-k@0.5`);
* `static-k@V*`: static with the k* found in variant V's sweep (`static-k@uniform*`),
  resolved only once V's sweep has finished, so it is planned after everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: static-k sweep as fractions of the site count: fine at small k, where the paper's
#: convex curve may well have its minimum on our scaled set-up (1, 2, 3, 5, 7, 10, 15, 20,
#: 30, 50, 70, 100 of 100 sites; the paper's k* = 70 is one of them)
SWEEP_FRACTIONS: tuple[float, ...] = (
    0.01,
    0.02,
    0.03,
    0.05,
    0.07,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.7,
    1.0,
)

#: settings reset to the workload's own defaults when a variant switches workload
WORKLOAD_FIELDS = ("lr", "batch_size", "local_steps", "tau_s", "eval_samples", "target_accuracy")


@dataclass(frozen=True)
class Variant:
    """A set-up shared by a group of runs: RunConfig overrides on top of the base config."""

    name: str
    label: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    #: False: no cut-off relative to PowerTrip (fixed-round runs, Figs. 7 and 11)
    budget: bool = True
    #: policy -> extra policy_params for that policy's arms in this set-up only (ablation)
    arm_params: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: this set-up's static sweep stops at this fraction of the sites (1.0: the whole grid);
    #: a cheaper sweep where every k past it adds straggler time and no accuracy per round
    sweep_up_to: float = 1.0


@dataclass(frozen=True)
class Suite:
    """One figure of the paper: the variants and arms it needs and what the paper shows."""

    figure: str
    title: str
    paper: str
    variants: tuple[str, ...]
    #: arm specs (see the module docstring), for every variant unless variant_arms says else
    arms: tuple[str, ...]
    #: variant -> its own arm specs (the ablation's reference set-up runs the sweep)
    variant_arms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: the report's time table lists every swept k (Figs. 8, 11), not only static-k*
    show_sweep: bool = False

    @property
    def out_name(self) -> str:
        """Report folder under OUT: fig8, fig6-7, ablation."""
        return f"fig{self.figure}" if self.figure[:1].isdigit() else self.figure

    def arms_of(self, variant: str) -> tuple[str, ...]:
        return tuple(self.variant_arms.get(variant, self.arms))


#: (out, set-up, seeds, sweep grid) -> what its finished sweep says (see Registry)
SweepReader = Callable[[Path, str, Sequence[int], Sequence[int]], Any]


@dataclass(frozen=True)
class Registry:
    """The suites a planner may run and the set-ups they name, handed in by whoever declares
    them, with how a finished static-k sweep is judged (the declarer reads its own runs)."""

    #: canonical key -> suite, in the order reports list them
    suites: Mapping[str, Suite]
    #: every set-up some suite names, by name
    variants: Mapping[str, Variant]
    #: every key a user may name (`--figure`) -> its canonical key ('7' -> '6-7')
    keys: Mapping[str, str]
    #: the refinement's new k of a set-up's finished grid ([] until it finished)
    refinement: SweepReader
    #: k* of a set-up's finished sweep (None until some seed's sweep finished)
    kstar: SweepReader

    def canonical(self, key: str) -> str:
        """A key a user named -> the suite's own key; KeyError for none."""
        if key in self.keys:
            return self.keys[key]
        if key in self.suites:
            return key
        raise KeyError(key)


@dataclass(frozen=True)
class Arm:
    """One concrete run of a group: a policy with its parameters."""

    name: str
    policy: str
    params: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class RunSpec:
    """A run to make: (variant, seed, arm), stored at OUT/runs/<variant>/seed<s>/<arm>/."""

    variant: str
    seed: int
    arm: Arm

    def path(self, out: Path) -> Path:
        return run_path(out, self.variant, self.seed, self.arm.name)


def run_path(out: Path, variant: str, seed: int, arm: str) -> Path:
    return out / "runs" / variant / f"seed{seed}" / arm


def clamp_k(k: float, num_sites: int) -> int:
    return max(1, min(num_sites, round(k)))


def sweep_ks(num_sites: int, fractions: Sequence[float] = SWEEP_FRACTIONS) -> list[int]:
    """The static k values of the sweep for this many sites (distinct, increasing)."""
    return sorted({clamp_k(f * num_sites, num_sites) for f in fractions})


def variant_ks(variant: Variant, ks: Sequence[int], num_sites: int) -> list[int]:
    """The sweep grid this set-up runs: `ks` up to its `sweep_up_to` share of the sites."""
    top = clamp_k(variant.sweep_up_to * num_sites, num_sites)
    return [k for k in ks if k <= top]


def static_arm(k: int) -> Arm:
    return Arm(f"static-k{k}", "static", (("k", float(k)),))


def deferred_source(spec: str) -> str | None:
    """'static-k@uniform*' -> 'uniform' (k* of another variant's sweep); else None."""
    if spec.startswith("static-k@") and spec.endswith("*"):
        return spec.removeprefix("static-k@").removesuffix("*")
    return None


def expand_arms(
    specs: Sequence[str], num_sites: int, ks: Sequence[int], variant: str = ""
) -> list[Arm]:
    """Concrete runs for arm specs, PowerTrip first (its time sets the others' cut-off).

    'static-k*' needs no run of its own (it is a sweep arm) but pulls the sweep in;
    'static-k@V*' is left out here (resolved after V's sweep) unless V is this variant,
    where it means 'static-k*'."""
    arms: list[Arm] = []
    wanted = [("static-k*" if deferred_source(s) == variant else s) for s in specs]
    if "static-k*" in wanted and "sweep" not in wanted:
        wanted.append("sweep")
    for spec in wanted:
        if spec == "static-k*" or deferred_source(spec):
            continue
        if spec == "sweep":
            arms.extend(static_arm(k) for k in ks)
        elif spec.startswith("static-k@"):
            fraction = float(spec.removeprefix("static-k@"))
            arms.append(static_arm(clamp_k(fraction * num_sites, num_sites)))
        else:
            arms.append(Arm(spec, spec))
    unique = list(dict.fromkeys(arms))
    return sorted(unique, key=lambda a: a.name != "powertrip")


def suite_arm_names(suite: Suite, variant: str, num_sites: int, ks: Sequence[int]) -> list[str]:
    """Arm names shown in a suite's tables: 'static-k*' and 'static-k@V*' (V another
    variant) kept as names, with the sweep's arms wherever static-k* needs them."""
    names: list[str] = []
    specs = [("static-k*" if deferred_source(s) == variant else s) for s in suite.arms_of(variant)]
    if "static-k*" in specs and "sweep" not in specs:
        specs.append("sweep")
    for spec in specs:
        if spec == "sweep":
            names.extend(static_arm(k).name for k in ks)
        elif spec.startswith("static-k@") and not deferred_source(spec):
            names.extend(a.name for a in expand_arms([spec], num_sites, ks))
        else:
            names.append(spec)
    return list(dict.fromkeys(names))


def refine_ks(grid: Sequence[int], best: int) -> list[int]:
    """The refinement step's new k values: the midpoint of each gap between the best grid
    k and its grid neighbours that is more than 1 wide (so an interior optimum between two
    coarse grid points gets a closer look); none when best is not on the grid."""
    ks = sorted(set(grid))
    if best not in ks:
        return []
    i = ks.index(best)
    found = []
    for neighbour in (ks[i - 1] if i > 0 else None, ks[i + 1] if i + 1 < len(ks) else None):
        if neighbour is not None and abs(best - neighbour) > 1:
            found.append((best + neighbour) // 2)
    return sorted(set(found) - set(ks))


__all__ = [
    "SWEEP_FRACTIONS",
    "WORKLOAD_FIELDS",
    "Arm",
    "Registry",
    "RunSpec",
    "Suite",
    "SweepReader",
    "Variant",
    "clamp_k",
    "deferred_source",
    "expand_arms",
    "refine_ks",
    "run_path",
    "static_arm",
    "suite_arm_names",
    "sweep_ks",
    "variant_ks",
]

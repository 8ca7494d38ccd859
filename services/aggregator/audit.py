"""An opt-in audit trail of FedAvg (`--audit-dir`): every accepted delta, every round's
contributors and weights, the initial model. `replay()` recomputes the model from it alone,
so an operator (or the chaos test) can check that the final model is exactly the FedAvg of
the accepted updates: none lost, none counted twice, no partial upload in the sum.

Layout: DIR/initial.npz, DIR/outer.json (the run's outer optimizer, powertrip/core/outer.py;
absent in audits written before it, which were FedAvg's), DIR/round-000001/{manifest.json,
site-000.npz, ...}. A round is
written under round-NNNNNN.partial/ and renamed once its model is installed; a round that is
redone (after a crash and --resume, or an empty round) starts its directory afresh, so a
committed round is always the one the model went on from. Arrays are stored with
numpy's npz and read with allow_pickle=False.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from powertrip.core.fedavg import StreamingFedAvg
from powertrip.core.outer import STORED as STORED_OUTER
from powertrip.core.outer import OuterStep, outer_update

INITIAL = "initial.npz"
OUTER = "outer.json"
MANIFEST = "manifest.json"


class AuditError(ValueError):
    """The audit directory is incomplete or inconsistent."""


def _round_dir(root: Path, round_no: int) -> Path:
    return root / f"round-{round_no:06d}"


def _write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write via a temporary name so a crash never leaves a half-written file in place."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, **{k: np.asarray(v) for k, v in arrays.items()})
    os.replace(tmp, path)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


class RoundAudit:
    """One round's record: its dispatch order, then each delta as it is accepted."""

    def __init__(self, root: Path, round_no: int, order: Iterable[str], model_version: int):
        self.root = root
        self.round_no = round_no
        self.order = list(order)
        self.model_version = model_version
        self.weights: dict[str, float] = {}
        self.partial = _round_dir(root, round_no).with_suffix(".partial")
        for stale in (self.partial, _round_dir(root, round_no)):
            shutil.rmtree(stale, ignore_errors=True)
        self.partial.mkdir(parents=True)

    def record(self, site: str, delta: Mapping[str, np.ndarray], weight: float) -> None:
        """Keep an accepted delta (called once per site, after it entered the sum)."""
        _write_npz(self.partial / f"{site}.npz", delta)
        self.weights[site] = float(weight)

    def commit(self, contributors: list[str]) -> None:
        """The round's model is installed: its contributors, in summation order, are final."""
        missing = [site for site in contributors if site not in self.weights]
        if missing:
            raise AuditError(f"round {self.round_no}: no recorded delta for {missing}")
        manifest = {
            "round": self.round_no,
            "model_version": self.model_version,
            "order": self.order,
            "contributors": contributors,
            "weights": {site: self.weights[site] for site in contributors},
        }
        (self.partial / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(self.partial, _round_dir(self.root, self.round_no))


class DeltaAudit:
    """The audit directory of one run."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def start(self, initial: Mapping[str, np.ndarray], outer: OuterStep | None = None) -> None:
        """A fresh run: the model every replay starts from and the outer step every round
        takes (both kept as they are on --resume)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for old in self.root.glob("round-*"):
            shutil.rmtree(old)
        _write_npz(self.root / INITIAL, initial)
        outer_json = json.dumps((outer or STORED_OUTER).to_json(), indent=1) + "\n"
        (self.root / OUTER).write_text(outer_json)

    def open_round(self, round_no: int, order: Iterable[str], model_version: int) -> RoundAudit:
        return RoundAudit(self.root, round_no, order, model_version)


def committed_rounds(root: Path) -> list[Path]:
    """The committed round directories, in round order."""
    return sorted(p for p in Path(root).glob("round-*") if p.suffix != ".partial")


def replay(root: Path, through_round: int | None = None) -> tuple[dict[str, np.ndarray], int]:
    """The model recomputed from the audit alone, and the number of rounds replayed.

    Uses the aggregator's own StreamingFedAvg in the recorded dispatch order and its outer
    step (outer.json), so the result
    is bit-for-bit what the aggregator computed if (and only if) the recorded deltas are
    exactly those it summed. Rounds must be consecutive from 1 (through `through_round`)."""
    root = Path(root)
    if not (root / INITIAL).is_file():
        raise AuditError(f"{root}: no {INITIAL}")
    weights = _read_npz(root / INITIAL)
    outer = STORED_OUTER  # an audit from before outer.json existed
    if (root / OUTER).is_file():
        try:
            outer = OuterStep.from_json(json.loads((root / OUTER).read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            raise AuditError(f"{root / OUTER}: not an outer step: {exc}") from None
        if outer.problems():
            raise AuditError(f"{root / OUTER}: {outer.problems()[0]}")
    buffer = None
    rounds = 0
    for directory in committed_rounds(root):
        manifest = json.loads((directory / MANIFEST).read_text())
        if through_round is not None and manifest["round"] > through_round:
            break
        if manifest["round"] != rounds + 1 or manifest["model_version"] != rounds:
            raise AuditError(
                f"{directory.name}: expected round {rounds + 1} on model version {rounds}, "
                f"found round {manifest['round']} on version {manifest['model_version']}"
            )
        fedavg = StreamingFedAvg(manifest["order"], weights)
        contributors = set(manifest["contributors"])
        for site in manifest["order"]:
            if site in contributors:
                delta = _read_npz(directory / f"{site}.npz")
                fedavg.add(site, delta, manifest["weights"][site])
            else:
                fedavg.skip(site)
        if fedavg.contributors != manifest["contributors"]:
            raise AuditError(f"{directory.name}: summation order differs from the manifest")
        weights, buffer = outer_update(weights, fedavg.result(), buffer, outer)
        rounds += 1
    return weights, rounds


def verify(audit_dir: Path, run_dir: Path) -> str:
    """Replay the audit and compare with the run's checkpoint; the verdict as one line.
    Raises AuditError on any difference."""
    from services.aggregator.checkpoint_store import load_checkpoint

    found = load_checkpoint(Path(run_dir))
    if found is None:
        raise AuditError(f"{run_dir}: no checkpoint to compare with")
    saved, state = found
    replayed, rounds = replay(audit_dir, through_round=int(state["round"]))
    if rounds != int(state["round"]):
        raise AuditError(f"the audit holds {rounds} rounds, the checkpoint {state['round']}")
    differ = [k for k in saved if not np.array_equal(saved[k], replayed.get(k))]
    if differ or set(saved) != set(replayed):
        raise AuditError(f"round {rounds}: the replayed model differs in {differ or 'keys'}")
    return f"{rounds} rounds replayed: the checkpoint's model is bit-identical"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m services.aggregator.audit",
        description="Recompute the model from an --audit-dir and check it against the run's "
        "checkpoint: the final model must be exactly the FedAvg of the accepted updates.",
    )
    parser.add_argument("audit_dir", type=Path)
    parser.add_argument("run_dir", type=Path, help="the aggregator's --out (holds checkpoint/)")
    args = parser.parse_args(argv)
    try:
        print(verify(args.audit_dir, args.run_dir))
    except (AuditError, OSError, KeyError, ValueError) as exc:
        print(f"audit: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

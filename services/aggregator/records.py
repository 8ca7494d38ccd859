"""What a run writes: rounds.csv, decisions.jsonl, wall.csv and summary.json.

Everything in rounds.csv derives from the seed on the simulated clock, so two runs with
the same seed produce identical files; wall-clock timings go to wall.csv instead.
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from powertrip.core import runfiles
from powertrip.core.runfiles import round_columns


@dataclass
class RoundRow:
    round: int
    sim_time_s: float
    round_time_s: float
    k: int
    sites: str
    accuracy: float
    loss: float
    compute_s: float
    comm_s: float
    wait_s: float
    aggregation_s: float
    #: the policy's prediction; None (an empty cell) on the wall clock, where the policy
    #: predicts in the time model's units, not in seconds that happened
    predicted_round_time_s: float | None
    bytes_up: int
    bytes_down: int
    emulated_bytes: float
    straggler: str
    mode: str
    train_loss: float
    clock: str
    #: wall clock only: what the time model says this round would take (the simulated
    #: clock's round_time_s for the same selection), beside the measured round_time_s
    model_round_time_s: float | None = None
    #: the round's footprint (runfiles.FOOTPRINT_COLUMNS; powertrip/core/footprint.py)
    energy_j: float | None = None
    idle_energy_j: float | None = None
    egress_gb: float | None = None
    egress_usd: float | None = None
    carbon_g: float | None = None


@dataclass
class WallTimes:
    """Real seconds of one round (wall.csv, `powertrip.core.runfiles.WALL_COLUMNS`): the round
    loop's phases, so the cost outside training can be told apart from training itself."""

    round_s: float = 0.0  # start -> new model installed
    train_s: float = 0.0  # start -> last delta in
    eval_s: float = 0.0
    profiles_s: float = 0.0  # GetProfiles and marking dead sites
    select_s: float = 0.0  # SelectSites and the time model's plan for the selection
    dispatch_s: float = 0.0  # tasks built and handed to the workers' queues
    collect_s: float = 0.0  # waiting for the deltas (the sites' training and uploads)
    aggregate_s: float = 0.0  # FedAvg result applied, new model encoded for downloads
    record_s: float = 0.0  # rounds.csv, decisions.jsonl, metrics, checkpoint

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the real seconds the block takes to the phase `name` (`dispatch` adds to
        dispatch_s); a phase timed in two blocks gets their sum."""
        start = time.monotonic()
        yield
        attr = f"{name}_s"
        setattr(self, attr, getattr(self, attr) + (time.monotonic() - start))

    @property
    def overhead_s(self) -> float:
        """Everything outside the sites' training and the evaluation."""
        return sum(getattr(self, c.removeprefix("wall_")) for c in runfiles.WALL_OVERHEAD_COLUMNS)

    def cells(self) -> list[str]:
        """The wall.csv values after `round`, in column order: the first three to the
        millisecond as they always were, the phases (often under one) to the microsecond."""
        values = [getattr(self, c.removeprefix("wall_")) for c in runfiles.WALL_COLUMNS[1:]]
        return [f"{v:.3f}" for v in values[:3]] + [f"{v:.6f}" for v in values[3:]]


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(round(value, 9))
    return str(value)


WALL_HEADER = ",".join(runfiles.WALL_COLUMNS) + "\n"


class RunRecorder:
    """Append-only round files. `keep_rounds` (on resume) keeps rows of rounds <= it and
    drops any written after the last checkpoint, so the files continue seamlessly."""

    def __init__(self, out_dir: Path, keep_rounds: int | None = None, clock: str = "simulated"):
        self.out_dir = Path(out_dir)
        self.columns = round_columns(clock)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.rounds_path = self.out_dir / runfiles.ROUNDS
        self.decisions_path = self.out_dir / runfiles.DECISIONS
        self.wall_path = self.out_dir / runfiles.WALL
        if keep_rounds is None:
            with self.rounds_path.open("w", newline="") as f:
                csv.writer(f).writerow(self.columns)
            self.decisions_path.write_text("")
            self.wall_path.write_text(WALL_HEADER)
            return
        header = ",".join(self.columns) + "\r\n"
        pad = _missing_cells(self.rounds_path, self.columns)
        _truncate(self.rounds_path, header, keep_rounds, lambda line: line.split(",", 1)[0], pad)
        _truncate(self.decisions_path, "", keep_rounds, lambda line: json.loads(line)["round"])
        _truncate(self.wall_path, WALL_HEADER, keep_rounds, lambda line: line.split(",", 1)[0])

    def add_round(self, row: RoundRow, decision: dict, wall: WallTimes | None = None) -> None:
        """The round's rounds.csv row and decision; its wall.csv row too if `wall` is given
        (the round loop gives it later, with add_wall, to include the checkpoint's time)."""
        values = asdict(row)
        with self.rounds_path.open("a", newline="") as f:
            csv.writer(f).writerow([_fmt(values[c]) for c in self.columns])
        with self.decisions_path.open("a") as f:
            f.write(json.dumps({"round": row.round, **decision}, sort_keys=True) + "\n")
        if wall is not None:
            self.add_wall(row.round, wall)

    def add_wall(self, round_no: int, wall: WallTimes) -> None:
        with self.wall_path.open("a") as f:
            f.write(",".join([str(round_no), *wall.cells()]) + "\n")

    def write_summary(self, summary: dict) -> None:
        tmp = self.out_dir / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
        os.replace(tmp, self.out_dir / runfiles.SUMMARY)


def _missing_cells(path: Path, columns: list[str]) -> str:
    """Empty cells for the columns a file written by an older version lacks at its end (a
    resumed run's earlier rows then have no footprint values rather than too few cells)."""
    try:
        with path.open(newline="") as f:
            old = f.readline().strip().split(",")
    except OSError:
        return ""
    if len(old) < len(columns) and columns[: len(old)] == old:
        return "," * (len(columns) - len(old))
    return ""


def _truncate(path: Path, header: str, keep_rounds: int, round_of, pad: str = "") -> None:
    """Rewrite `path` keeping its header and the lines of rounds <= keep_rounds (each with
    `pad` added before its line end)."""
    lines = []
    if path.exists():
        with path.open(newline="") as f:  # keep csv's \r\n line ends byte for byte
            lines = f.read().splitlines(keepends=True)
    if header:
        lines = lines[1:]
    kept = []
    for line in lines:
        if not line.strip():
            continue
        try:
            if int(round_of(line)) <= keep_rounds:
                body = line.rstrip("\r\n")
                kept.append(body + pad + line[len(body) :])
        except (ValueError, KeyError, json.JSONDecodeError):
            break  # a half-written last line from the crash
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(header + "".join(kept), newline="")
    os.replace(tmp, path)


def round_sites(out_dir: Path) -> dict[int, list[str]]:
    """Each round's selected site ids from rounds.csv, in the order the policy gave them
    (the `sites` column joins them with ';'). For rebuilding RoundRecord.site_ids on resume
    from a checkpoint written before the history carried them; {} when there is no file."""
    path = Path(out_dir) / runfiles.ROUNDS
    if not path.exists():
        return {}
    out: dict[int, list[str]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            try:
                out[int(row["round"])] = [s for s in (row.get("sites") or "").split(";") if s]
            except (KeyError, TypeError, ValueError):
                continue  # a torn last line: that round is redone anyway
    return out

"""The operator's verbs: `powertrip ls DIR` (the runs under a directory and where each
stands) and `powertrip status ADDRESS` (a deployed aggregator's run as it goes), each as a
table for people or `--format json` for scripts.

Why here and not in the services: both read what the services already publish (a run
directory's files, the aggregator's GetStatus RPC) and need nothing a service holds.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from powertrip.core import runfiles
from powertrip.rpc.channels import open_channel
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc

#: a run directory with rounds but no summary: still running, or killed (`run --resume`)
IN_PROGRESS = "in progress or stopped"
#: the columns `ls` shows, in order (json: the keys of each run)
LS_COLUMNS = (
    "run",
    "state",
    "policy",
    "workload",
    "clock",
    "rounds",
    "final_accuracy",
    "time_to_target_h",
    "stopped_reason",
)


class OperateError(Exception):
    """What an operator verb could not do, said so that the user can act on it."""


def find_runs(root: Path) -> list[Path]:
    """Every run directory under `root` (itself included): one that holds a rounds.csv or a
    summary.json, sorted by path. A run's own subfolders (checkpoint, logs) are not runs."""
    if not root.is_dir():
        raise OperateError(f"{root}: no such directory")
    found = []
    for marker in (runfiles.ROUNDS, runfiles.SUMMARY):
        found += [p.parent for p in root.rglob(marker)]
    return sorted(set(found))


def run_entry(path: Path, root: Path) -> dict[str, Any]:
    """One run's line: its state from summary.json, or from rounds.csv when it has none."""
    entry: dict[str, Any] = dict.fromkeys(LS_COLUMNS)
    entry["run"] = str(path.relative_to(root)) if path != root else "."
    summary_path = path / runfiles.SUMMARY
    if summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            entry["state"] = f"unreadable summary.json ({exc.__class__.__name__})"
            return entry
        for key in LS_COLUMNS[2:]:
            entry[key] = summary.get(key)
        entry["state"] = summary.get("status") or "done"
        return entry
    entry["state"] = IN_PROGRESS
    rounds = path / runfiles.ROUNDS
    if rounds.is_file():
        lines = [line for line in rounds.read_text().splitlines()[1:] if line.strip()]
        entry["rounds"] = len(lines)
    return entry


def list_runs(root: Path) -> list[dict[str, Any]]:
    return [run_entry(path, root) for path in find_runs(root)]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Plain aligned columns (what `ls` and `status` print without --format json)."""
    cells = [list(columns)] + [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def status_of(
    address: str, credentials: grpc.ChannelCredentials | None = None, timeout_s: float = 5.0
) -> dict[str, Any]:
    """A deployed aggregator's GetStatus as a dict (the last round's record included)."""
    try:
        with open_channel(address, credentials) as channel:
            reply = aggregator_pb2_grpc.AggregatorStub(channel).GetStatus(
                aggregator_pb2.GetStatusRequest(), timeout=timeout_s
            )
    except grpc.RpcError as exc:
        raise OperateError(
            f"{address}: GetStatus failed: {exc.code().name}: {exc.details()}"
        ) from None
    alive = max(0, reply.registered_sites - reply.dead_sites)
    status = {
        "address": address,
        "state": reply.state,
        "round": reply.round,
        "max_rounds": reply.max_rounds,
        "k": reply.k,
        "accuracy": reply.accuracy,
        "sim_time_s": reply.sim_time_s,
        "num_sites": reply.num_sites,
        "registered_sites": reply.registered_sites,
        "dead_sites": reply.dead_sites,
        "alive_sites": alive,
        "message": reply.message,
    }
    if reply.HasField("last"):
        status["last_round"] = {
            "round": reply.last.round,
            "k": reply.last.k,
            "accuracy": reply.last.accuracy,
            "round_time_s": reply.last.round_time_s,
            "sim_time_s": reply.last.sim_time_s,
        }
    return status


def status_lines(status: dict[str, Any]) -> str:
    """The status as `key  value` lines."""
    keys = [k for k in status if k != "last_round"]
    rows = [{"field": k, "value": status[k]} for k in keys]
    return table(rows, ("field", "value"))


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False)


def ls_output(root: Path, fmt: str) -> str:
    rows = list_runs(root)
    if fmt == "json":
        return dumps(rows)
    if not rows:
        return f"no runs under {root}"
    return table(rows, LS_COLUMNS)


def log_files(run: Path, service: str = "") -> list[Path]:
    """A run's service logs (RUN/logs/*.log), or the one of `service` (its name or the
    start of it: `site_worker` matches site_worker:0 and site_worker:1)."""
    logs = run / runfiles.LOGS_DIR
    if not logs.is_dir():
        raise OperateError(f"{run}: no {runfiles.LOGS_DIR}/ folder (not a run directory?)")
    files = sorted(logs.glob("*.log"))
    if service:
        files = [f for f in files if f.stem == service or f.stem.startswith(service + ":")]
        if not files:
            names = ", ".join(sorted(f.stem for f in logs.glob("*.log"))) or "none"
            raise OperateError(f"{run}: no log of {service!r}; there are: {names}")
    return files


def follow_logs(
    run: Path, service: str = "", tail: int = 20, follow: bool = False, poll_s: float = 0.5
) -> int:
    """Print the last `tail` lines of each log, each prefixed with its process; with
    `follow`, then every new line until the run's summary.json appears (one last read) or
    Ctrl-C. Exit 0; 2 for a directory without logs; 130 on Ctrl-C."""
    try:
        files = log_files(run, service)
    except OperateError as exc:
        print(f"powertrip logs: {exc}", file=sys.stderr)
        return 2
    offsets: dict[Path, int] = {}
    for path in files:
        lines = path.read_text(errors="replace").splitlines()
        for line in lines[-tail:] if tail > 0 else []:
            print(f"[{path.stem}] {line}")
        offsets[path] = path.stat().st_size
    if not follow:
        return 0
    try:
        while True:
            done = (run / runfiles.SUMMARY).exists()
            for path in log_files(run, service):  # a worker started later has a new log
                start = offsets.get(path, 0)
                size = path.stat().st_size
                if size > start:
                    with path.open("rb") as f:
                        f.seek(start)
                        data = f.read(size - start)
                    # print whole lines only; a partial last line waits for the next read
                    whole = data[: data.rfind(b"\n") + 1]
                    for line in whole.decode(errors="replace").splitlines():
                        print(f"[{path.stem}] {line}", flush=True)
                    offsets[path] = start + len(whole)
            if done:
                return 0
            time.sleep(poll_s)
    except KeyboardInterrupt:
        return 130

"""Checkpoints: the model plus every piece of loop state the following rounds depend on.

Written atomically after a round (when the run asks for it) and read back by --resume,
which continues the run to the same bytes it would have written uninterrupted.

What a round costs to checkpoint must not grow with the number of sites more than it has
to: the last profiles (every site's, megabytes at 100,000 sites) go to a file of their own,
named by their hash and written only when they change (in uniform power mode, once), and
the last selection is kept without its shadow decisions, which nothing reads back.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from powertrip.core import runfiles
from powertrip.core.config import EXECUTION_SETTINGS, RUN_LIMITS, RunConfig, experiment_differences
from services.aggregator.records import round_sites
from services.aggregator.run_result import CheckpointRecord, LoopResult

CHECKPOINT_DIR = runfiles.CHECKPOINT_DIR
CHECKPOINT_FORMAT = 1
#: Settings that may differ between a run and its resumption: how it is executed, and its
#: limits (powertrip.core.config names both; a resumed run may be extended)
RESUMABLE_CHANGES = EXECUTION_SETTINGS | RUN_LIMITS


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt or belongs to another run; the message says which."""


#: side files of the loop state, named by their content's hash (see write_checkpoint)
PROFILES_FILE = "profiles-{}.pb"
OUTER_FILE = "outer-{}.npz"


def _write_synced(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_checkpoint(
    out_dir: Path,
    weights: dict[str, np.ndarray],
    state: dict,
    files: dict[str, bytes] | None = None,
) -> None:
    """Write the model and `files` (name -> bytes, named by their content: one already
    there is not written again), then the loop state that names them (each atomically,
    fsynced).

    state.json is the commit point: it is replaced only once every file it names is on
    disk, so a kill at any instant leaves a consistent set (the previous one or the new
    one). Older model and side files are removed afterwards.
    """
    ckpt = Path(out_dir) / CHECKPOINT_DIR
    ckpt.mkdir(exist_ok=True)
    name = f"model-{int(state['round']):06d}.npz"
    tmp = ckpt / f"{name}.tmp"
    with tmp.open("wb") as f:
        np.savez(f, **weights)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, ckpt / name)
    files = files or {}
    for file_name, data in files.items():
        if not (ckpt / file_name).is_file():
            _write_synced(ckpt / file_name, data)
    record = {
        **state,
        "format": CHECKPOINT_FORMAT,
        "model_file": name,
        "model_sha256": _sha256(ckpt / name),
    }
    # compact: json's C encoder (an indented dump runs in Python, over the whole history)
    _write_synced(ckpt / "state.json", json.dumps(record).encode())
    side_files = [*ckpt.glob(PROFILES_FILE.format("*")), *ckpt.glob(OUTER_FILE.format("*"))]
    for old in [*ckpt.glob("model*.npz"), *side_files]:
        if old.name != name and old.name not in files:
            old.unlink(missing_ok=True)


def load_checkpoint(out_dir: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """(weights, state) of the last checkpoint under `out_dir`, or None if there is none.

    Raises CheckpointError naming the file when one exists but cannot be trusted.
    """
    ckpt = Path(out_dir) / CHECKPOINT_DIR
    state_path = ckpt / "state.json"
    if not state_path.exists():
        return None
    try:
        state = json.loads(state_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{state_path}: unreadable checkpoint state: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{state_path}: not a format-{CHECKPOINT_FORMAT} checkpoint (written by an older "
            "version?); start a new run instead"
        )
    model_path = ckpt / str(state.get("model_file", ""))
    if not model_path.is_file():
        raise CheckpointError(f"{state_path}: names model file {model_path.name}, which is missing")
    if _sha256(model_path) != state.get("model_sha256"):
        raise CheckpointError(f"{model_path}: SHA-256 does not match {state_path}")
    with np.load(model_path, allow_pickle=False) as data:
        weights = {k: data[k] for k in data.files}
    return weights, state


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


class CheckpointPart(Protocol):
    """An owner of loop state that a checkpoint carries."""

    def checkpoint_into(self, record: CheckpointRecord) -> None: ...

    def restore_checkpoint(self, record: CheckpointRecord) -> None: ...


class CheckpointStore:
    """The checkpoint of one run directory, checked against the run's configuration."""

    def __init__(self, out_dir: Path, run: RunConfig):
        self.out_dir = Path(out_dir)
        self.run = run
        #: the profiles last saved and their file (bytes, name, SHA-256): the control client
        #: hands over the same bytes object while its profiles are unchanged, so the same
        #: object needs no hashing again
        self._saved_profiles: tuple[bytes, str, str] | None = None
        #: writes go to disk on one thread while the next round runs (serializing and
        #: fsyncing some 50 MB took a tenth of a small round); one at a time, in order
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: Future | None = None

    def save(self, record: CheckpointRecord, *parts: CheckpointPart) -> None:
        """Write `record`, once each of `parts` (the aggregator's state, its control
        client) has filled in its share. The replies are as the control client keeps them:
        a Selection without its shadow decisions, and a SiteColumns, serialized.

        The state is taken now, the arrays copied (the next round may reuse them), and the
        files written in the background: a crash before they land leaves the previous
        checkpoint, and a resume from it drops the rounds after it from the run's files.
        The previous write is waited for first, so its error surfaces here; `flush` waits
        for the last."""
        for part in parts:
            part.checkpoint_into(record)
        last_selection, last_profiles = record.last_selection, record.last_profiles
        state: dict[str, Any] = {
            "round": record.round,
            "model_version": record.model_version,
            "sim_time_s": record.result.sim_time_s,
            "result": record.result.to_json(),
            "dead_sites": sorted(record.dead_sites),
            "config": self.run.to_dict(),
        }
        if last_selection is not None:
            # what a fallback reuses: the sites, k and mode, never the shadow decisions
            state["last_selection"] = _encode(last_selection)
        files = {}
        if last_profiles is not None:
            saved = self._saved_profiles
            if saved is None or saved[0] is not last_profiles:
                digest = hashlib.sha256(last_profiles).hexdigest()
                saved = (last_profiles, PROFILES_FILE.format(digest[:16]), digest)
                self._saved_profiles = saved
            data, name, digest = saved
            state["last_profiles_file"], state["last_profiles_sha256"] = name, digest
            files[name] = data
        weights = {k: np.array(v, copy=True) for k, v in record.weights.items()}
        outer = record.outer_buffer
        if outer is not None:
            outer = {k: np.array(v, copy=True) for k, v in outer.items()}
        self.flush()
        self._pending = self._writer.submit(self._write, weights, state, files, outer)

    def _write(
        self,
        weights: dict[str, np.ndarray],
        state: dict[str, Any],
        files: dict[str, bytes],
        outer: dict[str, np.ndarray] | None,
    ) -> None:
        if outer is not None:
            data = _npz_bytes(outer)
            digest = hashlib.sha256(data).hexdigest()
            name = OUTER_FILE.format(digest[:16])
            state["outer_buffer_file"], state["outer_buffer_sha256"] = name, digest
            files[name] = data
        write_checkpoint(self.out_dir, weights, state, files)

    def flush(self) -> None:
        """Wait until the last checkpoint is on disk; raise what writing it raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def load(self, initial: dict[str, np.ndarray]) -> CheckpointRecord | None:
        """The checkpoint to continue from, or None if there is none. Raises CheckpointError
        if it belongs to another configuration or its model does not fit `initial`'s."""
        self.flush()  # this store's own last write first
        found = load_checkpoint(self.out_dir)
        if found is None:
            return None
        weights, saved = found
        self._check(initial, weights, saved)
        last_selection = last_profiles = last_reply = None
        if saved.get("last_selection"):
            last_selection = base64.b64decode(saved["last_selection"])
        if saved.get("last_profiles_file"):
            last_profiles = self._profiles_file(saved)
        elif saved.get("last_profiles"):  # inline, as checkpoints written before the file
            last_reply = base64.b64decode(saved["last_profiles"])
        outer_buffer = None
        if saved.get("outer_buffer_file"):
            outer_buffer = self._outer_file(saved, weights)
        return CheckpointRecord(
            round=int(saved["round"]),
            model_version=int(saved["model_version"]),
            weights=weights,
            result=LoopResult.from_json(saved["result"]),
            dead_sites=list(saved.get("dead_sites", [])),
            last_selection=last_selection,
            last_profiles=last_profiles,
            last_profiles_reply=last_reply,
            outer_buffer=outer_buffer,
        )

    def _side_file(self, saved: dict, key: str, what: str) -> tuple[Path, bytes]:
        """(path, bytes) of the side file state.json names under `key` ("..._file"),
        checked against the SHA-256 it records beside it ("..._sha256")."""
        path = self.out_dir / CHECKPOINT_DIR / str(saved[key])
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"{path}: unreadable checkpoint {what}: {exc}") from None
        if hashlib.sha256(data).hexdigest() != saved.get(key.replace("_file", "_sha256")):
            raise CheckpointError(f"{path}: SHA-256 does not match its state.json")
        return path, data

    def _profiles_file(self, saved: dict) -> bytes:
        """The last profiles' bytes, checked by their hash."""
        return self._side_file(saved, "last_profiles_file", "profiles")[1]

    def _outer_file(self, saved: dict, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outer optimizer's buffer, checked by its hash and against the model's shapes."""
        path, data = self._side_file(saved, "outer_buffer_file", "outer optimizer state")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            buffer = {k: npz[k] for k in npz.files}
        if any(k not in weights or buffer[k].shape != weights[k].shape for k in buffer):
            raise CheckpointError(f"{path}: the outer optimizer's buffer does not fit the model")
        return buffer

    def _check(self, initial: dict[str, np.ndarray], weights: dict, saved: dict) -> None:
        where = self.out_dir / CHECKPOINT_DIR / "state.json"
        differ = experiment_differences(
            saved.get("config", {}), self.run.to_dict(), also=RUN_LIMITS
        )
        if differ:
            raise CheckpointError(
                f"{where}: the run configuration differs from the checkpoint's in "
                f"{', '.join(differ)}; resume with the run's own configuration"
            )
        if list(weights) != list(initial) or any(
            weights[k].shape != initial[k].shape or weights[k].dtype != initial[k].dtype
            for k in initial
        ):
            raise CheckpointError(f"{where}: the checkpointed model does not match the workload")


def restore_site_ids(result: LoopResult, out_dir: Path) -> None:
    """Checkpoints written before RoundRecord.site_ids existed have history without it
    (a policy such as static-k reads round 1's set from it): take each round's sites
    from rounds.csv, already trimmed to the checkpoint's round."""
    if all(h.site_ids for h in result.history):
        return
    sites = round_sites(out_dir)
    result.history[:] = [
        h if h.site_ids else replace(h, site_ids=tuple(sites.get(h.round, [])))
        for h in result.history
    ]

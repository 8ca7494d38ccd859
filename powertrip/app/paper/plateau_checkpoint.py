"""A plateau run's checkpoint: the weights and the policy's history after a round, beside
the run's CSV, so that a run of hundreds of rounds can stop (a device call's time limit,
Ctrl-C) and go on (`plateau_policies --resume`) as if it had not stopped.

Written with torch.save and read with torch.load(weights_only=True): tensors, numbers,
strings and lists only, no code to unpickle. The task seeds depend only on the seed, the
round and the site, so the state after round r is all a run needs to go on.
"""

from __future__ import annotations

from pathlib import Path

from powertrip.app.paper.plateau_draws import read_rows
from powertrip.core.config import ConfigError, RunConfig

#: RunConfig fields that say how long or with what resources a run goes, not what it
#: computes: a resumed run may change them (e.g. a higher round limit)
RESUMABLE_CHANGES = frozenset(
    {"max_rounds", "max_sim_hours", "data_dir", "train_threads", "workers",
     "threads_per_worker", "round_deadline_s", "checkpoint"}
)  # fmt: skip
#: a checkpoint is written after every this many rounds (and when the run is interrupted)
CHECKPOINT_EVERY = 10


def checkpoint_path(out_csv: Path) -> Path:
    """The run's checkpoint beside its CSV: the weights and history after a round."""
    return out_csv.with_suffix(".ckpt.pt")


def identity_of(run: RunConfig) -> str:
    """What a run computes, as text: the settings a resumed run must share with the
    checkpoint."""
    return repr(sorted((k, v) for k, v in run.to_dict().items() if k not in RESUMABLE_CHANGES))


def save_checkpoint(path: Path, run: RunConfig, weights: dict, history: list, sim_time: float):
    """Atomically write the state after round len(history): weights on the CPU, the history
    as plain lists (torch.load(weights_only=True) reads it back without unpickling code)."""
    import torch

    state = {
        "format": 1,
        "identity": identity_of(run),
        "round": len(history),
        "sim_time_s": sim_time,
        "weights": {n: v.detach().cpu() for n, v in weights.items()},
        "history": [
            [
                int(h.round),
                int(h.k),
                float(h.accuracy),
                float(h.round_time_s),
                [str(x) for x in h.site_ids],
                [str(x) for x in h.reported_site_ids],
                [float(x) for x in h.site_train_loss],
                [int(x) for x in h.site_num_samples],
                [float(x) for x in h.site_duration_s],
            ]
            for h in history
        ],  # fmt: skip
    }
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path, run: RunConfig, out_csv: Path, device: str):
    """(weights, history, sim_time, rows) to go on from: the checkpoint's state and the
    CSV's rows up to its round. A checkpoint of another run, or a CSV that lacks its
    rounds, is refused by name."""
    import torch

    from powertrip.core.policies import PastRound

    if not path.exists():
        raise ConfigError(f"--resume: no checkpoint {path} (a run writes one every "
                          f"{CHECKPOINT_EVERY} rounds and when interrupted)")  # fmt: skip
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("format") != 1:
        raise ConfigError(f"--resume: {path} is not a plateau runner's checkpoint")
    if state["identity"] != identity_of(run):
        raise ConfigError(f"--resume: {path} was written by a run with other settings "
                          "(policy, parameters, seed or learning); start a new one")  # fmt: skip
    done = int(state["round"])
    rows = read_rows(out_csv) if out_csv.exists() else []
    if [int(r["round"]) for r in rows[:done]] != list(range(1, done + 1)):
        raise ConfigError(f"--resume: {out_csv} does not hold rounds 1-{done} of the checkpoint")
    history = [
        PastRound(int(h[0]), int(h[1]), float(h[2]), float(h[3]), *(tuple(x) for x in h[4:]))
        for h in state["history"]
    ]
    weights = {n: v.to(device) for n, v in state["weights"].items()}
    return weights, history, float(state["sim_time_s"]), rows[:done]

"""What a finished round and a finished run report, built from their facts.

A round gives one rounds.csv row, one decisions.jsonl entry and one history record for
the policy; the run gives summary.json. Pure builders: the round loop gathers the facts,
records.py writes the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from powertrip.core.config import RunConfig
from powertrip.core.footprint import JOULES_PER_KWH, RoundFootprint
from powertrip.core.timemodel import RoundTime
from services.aggregator.clock import Clock, clock_of
from services.aggregator.domain import Selection
from services.aggregator.records import RoundRow
from services.aggregator.round import RoundInProgress
from services.aggregator.run_result import LoopResult, RoundRecord


@dataclass
class FinishedRound:
    """One trained and evaluated round, on the run's clock."""

    round_no: int
    selection: Selection
    progress: RoundInProgress
    steps: dict[str, int]  # each site's local steps, as asked
    accuracy: float
    loss: float
    round_s: float  # the round's length on the run's clock
    model_round_s: float  # the time model's length of it
    timing: RoundTime  # the model's breakdown, or the measured one on the wall clock
    predicted_s: float | None  # the policy's prediction; None on the wall clock
    sim_time_s: float  # the run's clock after the round
    model_bytes: int
    dead_sites: set[str]
    #: the round's energy, egress and carbon (services/aggregator/accounting.py)
    footprint: RoundFootprint | None = None
    #: each delivering site's own duration on the run's clock (compute + communication)
    site_durations: dict[str, float] | None = None

    @property
    def k(self) -> int:
        return len(self.selection.site_ids)


class RoundFiles(NamedTuple):
    """A finished round as the run's files and history hold it (round_files)."""

    row: RoundRow
    decision: dict
    history: RoundRecord


def round_row(run: RunConfig, clock: Clock, done: FinishedRound) -> RoundRow:
    selection, progress, timing = done.selection, done.progress, done.timing
    contributed = progress.fedavg.contributors
    return RoundRow(
        round=done.round_no,
        sim_time_s=done.sim_time_s,
        round_time_s=done.round_s,
        k=done.k,
        sites=";".join(selection.site_ids),
        accuracy=done.accuracy,
        loss=done.loss,
        compute_s=timing.compute_s,
        comm_s=timing.comm_s,
        wait_s=timing.wait_s,
        aggregation_s=timing.aggregation_s,
        predicted_round_time_s=done.predicted_s,
        bytes_up=progress.bytes_up,
        bytes_down=len(contributed) * done.model_bytes,
        emulated_bytes=run.comm_directions * run.update_size_bytes * done.k,
        straggler=timing.straggler,
        mode=selection.mode,
        train_loss=float(np.mean([progress.train_loss[s] for s in contributed])),
        **clock.row_fields(done.model_round_s),
        **_footprint_cells(done.footprint),
    )


def _footprint_cells(footprint: RoundFootprint | None) -> dict[str, float | None]:
    if footprint is None:
        return {}
    return {
        "energy_j": footprint.energy_j,
        "idle_energy_j": footprint.idle_energy_j,
        "egress_gb": footprint.egress_gb,
        "egress_usd": footprint.egress_usd,
        "carbon_g": footprint.carbon_g,
    }


def decision_entry(run: RunConfig, clock: Clock, done: FinishedRound) -> dict:
    """The round's decisions.jsonl entry (the recorder adds the round number)."""
    selection, progress = done.selection, done.progress
    decision = {
        "policy": selection.policy,
        "k": done.k,
        "predicted_round_time_s": selection.predicted_round_time_s,
        "actual_round_time_s": done.round_s,
        "explanation": _json_or_text(selection.explanation),
        "failed_sites": sorted(progress.failed),
        "dead_sites": sorted(done.dead_sites),
        "shadows": [
            {"policy": s.policy, "k": s.k, "predicted_round_time_s": s.predicted_round_time_s}
            for s in selection.shadows
        ],
    }
    if run.work_model == "data-parallel":
        # each site's share of W, as asked and as its worker reports having trained
        decision["local_steps"] = done.steps
        decision["trained_steps"] = {s: progress.steps[s] for s in sorted(progress.steps)}
    if run.work_model == "power-split":
        # each site's batch b_i of B, as asked, and the FedAvg weight it got (H x b_i)
        tasks = sorted(progress.tasks.values(), key=lambda t: t.site_id)
        decision["batch_size"] = {t.site_id: t.batch_size for t in tasks}
        decision["fedavg_weight"] = dict(sorted(progress.fedavg_weights.items()))
    decision.update(clock.decision_fields(done.model_round_s))
    return decision


def history_record(done: FinishedRound) -> RoundRecord:
    """The round as the policy sees it in later rounds' history, with what each site that
    delivered reported (in the policy's order)."""
    progress, durations = done.progress, done.site_durations or {}
    reported = [s for s in done.selection.site_ids if s in progress.train_loss]
    return RoundRecord.of(
        round=done.round_no,
        k=done.k,
        accuracy=done.accuracy,
        round_time_s=done.round_s,
        predicted_round_time_s=done.selection.predicted_round_time_s,
        sim_time_s=done.sim_time_s,
        site_ids=done.selection.site_ids,
        reported_site_ids=reported,
        site_train_loss=[progress.train_loss[s] for s in reported],
        site_num_samples=[progress.num_samples.get(s, 0) for s in reported],
        site_duration_s=[durations.get(s, done.round_s) for s in reported],
    )


def round_files(run: RunConfig, clock: Clock, done: FinishedRound) -> RoundFiles:
    """Everything a finished round leaves behind, built at once: its rounds.csv row, its
    decisions.jsonl entry and its record in the history the policy reads."""
    return RoundFiles(
        round_row(run, clock, done), decision_entry(run, clock, done), history_record(done)
    )


def run_summary(
    run: RunConfig,
    result: LoopResult,
    status: str,
    message: str,
    sites: list[dict],
    energy_meters: dict[str, str] | None = None,
) -> dict:
    """summary.json: the run's settings, outcome and site table; with `energy_meters` (site
    -> what measured its energy, when a worker measured it) the sources of measured energy."""
    rounds_k = [r.k for r in result.history]
    summary = {
        "policy": run.policy,
        "workload": run.workload,
        "clock": run.clock,
        "work_model": run.work_model,
        "estimator": run.estimator,
        "status": status,
        "message": message,
        "num_sites": run.num_sites,
        "seed": run.seed,
        "rounds": result.rounds,
        "target_accuracy": run.target_accuracy,
        "target_perplexity": run.target_perplexity,
        "final_accuracy": result.accuracy,
        "best_accuracy": result.best_accuracy,
        "time_to_target_s": result.time_to_target_s,
        "time_to_target_h": None
        if result.time_to_target_s is None
        else result.time_to_target_s / 3600,
        "sim_time_s": result.sim_time_s,
        "stopped_reason": result.stopped_reason,
        "mean_k": float(np.mean(rounds_k)) if rounds_k else 0.0,
        "update_size_gb": run.update_size_gb,
        **footprint_summary(run, result),
        "sites": sites,
    }
    if run.delta_encoding != "fp32":  # only then, as tau_source below
        errors = result.encoding_errors
        summary["delta_encoding"] = run.delta_encoding
        summary["delta_encoding_error"] = {
            "mean": float(np.mean(errors)) if errors else None,
            "max": float(np.max(errors)) if errors else None,
        }
    if run.tau_source != "fixed":  # only then: a fixed-tau run's summary stays as it was
        summary["tau_source"] = run.tau_source
        summary["tau_s"] = run.tau_s
    if energy_meters:  # only then: an unmeasured run's summary stays as it was
        summary["energy_meters"] = dict(sorted(energy_meters.items()))
    summary["clock_note"] = clock_of(run).note
    return summary


def footprint_summary(run: RunConfig, result: LoopResult) -> dict:
    """summary.json's footprint keys (runfiles.FOOTPRINT_SUMMARY_KEYS): run totals (None
    when a resume from an older checkpoint left rounds uncounted), the totals when the
    target was reached, and the settings that priced them."""
    totals = result.footprint.summary() if result.footprint is not None else None
    keys = ("energy_kwh", "idle_energy_kwh", "egress_gb", "egress_usd", "carbon_kg")
    at = result.footprint_at_target
    return {
        **{k: None if totals is None else totals[k] for k in keys},
        "energy_to_target_kwh": None if at is None else at["energy_kwh"],
        "egress_usd_to_target": None if at is None else at["egress_usd"],
        "carbon_kg_to_target": None if at is None else at["carbon_kg"],
        "footprint": {
            "gpu_power_w": run.gpu_power_w,
            "gpu_idle_power_w": run.gpu_idle_power_w,
            "egress_usd_per_gb": run.egress_usd_per_gb,
            "carbon_g_per_kwh": run.carbon_g_per_kwh,
            "carbon_trace": run.carbon_trace,
            "joules_per_kwh": JOULES_PER_KWH,
        },
    }


def _json_or_text(text: str) -> object:
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {"text": text}

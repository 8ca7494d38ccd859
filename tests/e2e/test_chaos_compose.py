"""Chaos in the real stack: `docker-compose up` on the wall clock with shaped links, then
four faults during the run, one after another:

1. a site worker is crashed (SIGKILL of its container's main process, as the OOM killer
   or a crash would) right after a round starts, while its task is out: the round closes
   at its deadline without the site, the restart policy starts the container again and the
   worker claims its site back under the same id;
2. the policy is `docker kill`ed: the aggregator retries, then reuses the last good
   selection for at least one round; `docker start` brings it back and later rounds use it;
3. the profiler likewise (last good profiles);
4. the aggregator is crashed: the restart policy starts it again with `--resume`, it
   continues from its last checkpoint, and the workers rejoin (deploy/entrypoint.py).

`docker kill` is a manual stop by Docker's rules (no restart), so crashes that the restart
policy must handle are injected by SIGKILL of the container's process from the host.

Checks: the run completes (summary.json `done`, every round once, consecutive, in
rounds.csv and decisions.jsonl); every round's accepted deltas (selected minus failed
sites) are in its average exactly once: `bytes_up` = accepted x a delta's int8 bytes; the
checkpoint's model version equals the number of rounds (no round aggregated twice, none
lost across the resume); the final model is bit-identical to the outer step on the
accepted deltas, recomputed from the aggregator's --audit-dir (services/aggregator/audit.py); and
the metrics show each fault: site failures, policy and profiler retries and fallbacks,
restarts (RestartCount, the aggregator's process_start_time_seconds).  A worker crashed
mid-upload (a 26 MB FEMNIST delta) is tests/e2e/test_chaos_upload.py.

Skipped, with the reason, when no Docker engine is reachable.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from services.aggregator.audit import verify
from tests.e2e.test_compose import (
    _PROBLEM,
    _inspect,
    _query,
    _run,
    _wait,
    last_round,
    run_decisions,
    run_rows,
    running_stack,
)

SITES = 4
# The synthetic model trains 5 steps a round by default, so a round takes ~0.2 s and a run
# of any sensible length ends before the four faults (~3 minutes of restarts) are through.
# 1500 local steps (~0.5 ms each on a loaded core) pace a round at ~1-2 s instead; if the
# run still ends first, the test says so: raise POWERTRIP_CHAOS_ROUNDS.
ROUNDS = int(os.environ.get("POWERTRIP_CHAOS_ROUNDS", "45"))
LOCAL_STEPS = "1500"  # ~1.7-2.8 s rounds here
# A crashed worker's round closes without it when its restart (start, shape, measure,
# register: ~8 s here) outlasts the deadline; a faster restart gets the round's task
# re-queued instead, which the test accepts too. 6 s (before) left no slack for a slow
# first round on a loaded machine: at load 14 every site missed round 1 and the run failed.
DEADLINE_S = int(os.environ.get("POWERTRIP_CHAOS_DEADLINE_S", "20"))

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]
if _PROBLEM:
    pytestmark.append(pytest.mark.skip(reason=_PROBLEM))


@pytest.fixture(scope="module")
def chaos_stack():
    with running_stack(
        "ptchaos",
        "chaos",
        POWERTRIP_SITES=str(SITES),
        POWERTRIP_POLICY="all",
        POWERTRIP_MAX_ROUNDS=str(ROUNDS),
        POWERTRIP_ROUND_DEADLINE_S=str(DEADLINE_S),
        POWERTRIP_LOCAL_STEPS=LOCAL_STEPS,
        POWERTRIP_PROBE_INTERVAL_S="60",
        POWERTRIP_AUDIT_DIR="/app/runs/chaos-audit",
    ) as stack:
        cmd, env = stack["cmd"], stack["env"]
        port = _run([*cmd, "port", "prometheus", "9090"], env=env).stdout.strip().rsplit(":", 1)[1]
        yield {**stack, "prom": f"http://127.0.0.1:{port}", "audit": stack["runs"] / "chaos-audit"}


# ---- reading the run ---------------------------------------------------------------------


def _metric(prom: str, expr: str) -> float:
    got = _query(prom, expr)
    return sum(float(r["value"][1]) for r in got)


# ---- containers --------------------------------------------------------------------------
def _ids(stack, service: str) -> list[str]:
    return _run([*stack["cmd"], "ps", "-q", service], env=stack["env"]).stdout.split()


class _Figures(dict):
    """Measured figures, printed as they come (a later failure still shows the earlier)."""

    def __setitem__(self, key: str, value: str) -> None:
        print(f"{key}: {value}", flush=True)
        super().__setitem__(key, value)


def _slowest_worker(stack) -> tuple[str, str]:
    """The site worker on the slowest link (its uploads take longest): (container, site)."""
    rates = []
    for cid in _ids(stack, "site-worker"):
        logs = _run(["docker", "logs", cid], check=False)
        found = re.findall(
            r"(site-\d+): shaped \S+ .*?rate ([\d.]+) mbit", logs.stdout + logs.stderr
        )
        if found:
            rates.append((float(found[-1][1]), cid, found[-1][0]))
    assert rates, "no site worker logged its shaping"
    return min(rates)[1:]


def _crash(cid: str) -> str:
    """SIGKILL the container's main process from the host: a crash the restart policy sees."""
    pid = int(_inspect(cid, "{{.State.Pid}}"))
    try:
        os.kill(pid, signal.SIGKILL)
        return "sigkill"
    except PermissionError:  # a rootless or remote engine: kill, then start by hand
        _run(["docker", "kill", cid])
        _run(["docker", "start", cid])
        return "docker kill + docker start"


def _restarted(cid: str) -> bool:
    state = _inspect(cid, "{{.RestartCount}} {{.State.Running}}").split()
    return int(state[0]) >= 1 and state[1] == "true"


def _running(out: Path) -> None:
    """Fail clearly if the run ended before a fault could land mid-run."""
    assert not (out / "summary.json").exists(), (
        f"the run finished ({last_round(out)} rounds) before every fault was injected: "
        "raise POWERTRIP_CHAOS_ROUNDS"
    )


def _round_after(out: Path, after: int, timeout_s: float, pred=lambda d: True) -> dict:
    """Wait for the first recorded round > `after` whose decision satisfies `pred`."""

    def found():
        _running(out)
        for d in run_decisions(out):
            if d["round"] > after and pred(d):
                return d
        return None

    return _wait(f"a round after {after} matching", found, timeout_s, every_s=0.5)


def test_compose_stack_survives_kills_and_resumes(chaos_stack):
    out, prom, stack = chaos_stack["out"], chaos_stack["prom"], chaos_stack
    t_start = time.monotonic()
    print(f"run directory: {out}")
    figures = _Figures()
    _wait("round 2", lambda: last_round(out) >= 2, timeout_s=900, every_s=1)

    # 1. the worker on the slowest link crashes just after a round starts, while its task is
    #    out (training or uploading; whether the stream was cut is printed, not asserted)
    worker, site = _slowest_worker(stack)
    before = last_round(out)
    _wait("the next round to start", lambda: last_round(out) > before, 300, every_s=0.05)
    r_kill = last_round(out)
    time.sleep(0.4)
    t_kill = time.monotonic()
    how = _crash(worker)
    _wait("the worker container restarted", lambda: _restarted(worker), 300, every_s=0.5)
    t_up = time.monotonic()
    worker_id = f"{worker[:12]}-1"

    def registrations() -> int:
        logs = _run([*stack["cmd"], "logs", "--no-color", "aggregator"], env=stack["env"])
        return logs.stdout.count(f"worker {worker_id} (")

    def outcome():
        for d in run_decisions(out):
            if d["round"] > r_kill and site in d["failed_sites"]:
                return d  # the round closed at its deadline without the site
        return "requeued" if registrations() >= 2 else None  # back within the deadline

    closed = _wait("the crashed site's round to close or the worker to rejoin", outcome, 300, 0.5)
    healthy = _round_after(
        out, r_kill, 300, lambda d: not d["failed_sites"] and d["k"] == SITES and
        (closed == "requeued" or d["round"] > closed["round"])
    )  # fmt: skip
    t_back = time.monotonic()
    if closed == "requeued":
        what = "the worker re-registered within the deadline and got the round's task again"
    else:
        # Prometheus sees the failure at its next scrape (every 5 s), not when the round closes
        _wait(
            "the site failure in Prometheus",
            lambda: _metric(prom, 'powertrip_site_failures_total{job="aggregator"}') >= 1,
            60,
            every_s=1,
        )
        what = f"round {closed['round']} closed at its deadline without {site}"
    figures["site worker"] = (
        f"{how} of {site}'s worker 0.4 s into round {r_kill + 1}; container up again in "
        f"{t_up - t_kill:.1f} s; {what}; all {SITES} sites delivered again in round "
        f"{healthy['round']}, {t_back - t_kill:.1f} s after the kill"
    )

    # 2. and 3. the policy, then the profiler, are killed for at least one round
    for service, counter in (("policy", "policy"), ("profiler", "profiler")):
        cid = _ids(stack, service)[0]
        r_kill = last_round(out)
        t_kill = time.monotonic()
        _run(["docker", "kill", cid])
        # a round that started after the kill had to fall back
        _wait(
            f"a round on the last good {service} answer",
            lambda c=counter: (
                _metric(prom, f'powertrip_{c}_fallbacks_total{{job="aggregator"}}') >= 1
            ),
            300,
            every_s=1,
        )
        r_fallback = _round_after(out, r_kill + 1, 300)["round"]
        _run(["docker", "start", cid])
        t_start_svc = time.monotonic()
        retries = _metric(
            prom, f'powertrip_dependency_retries_total{{job="aggregator",dependency="{counter}"}}'
        )
        assert retries >= 1, f"no {service} retries counted"
        if service == "policy":
            used = _round_after(
                out, r_fallback, 300, lambda d: "fallback" not in json.dumps(d["explanation"])
            )
        else:
            r_now = last_round(out)
            _wait(f"{service} healthy", lambda c=cid: _inspect(c, "{{.State.Health.Status}}")
                  == "healthy", 300, every_s=1)  # fmt: skip
            used = _round_after(out, max(r_now, r_fallback) + 1, 300)
        t_back = time.monotonic()
        figures[service] = (
            f"docker kill after round {r_kill}; {int(retries)} retries, fallback by round "
            f"{r_fallback}; started again after {t_start_svc - t_kill:.1f} s down; round "
            f"{used['round']} ran on it again {t_back - t_start_svc:.1f} s after the start"
        )

    # the aggregator's counters are reset by its restart: read them now
    assert _metric(prom, 'powertrip_policy_fallbacks_total{job="aggregator"}') >= 1
    assert _metric(prom, 'powertrip_profiler_fallbacks_total{job="aggregator"}') >= 1
    start_before = _metric(prom, 'process_start_time_seconds{job="aggregator"}')

    # 4. the aggregator crashes; the restart policy brings it back with --resume
    agg = _ids(stack, "aggregator")[0]
    _running(out)
    checkpoint = json.loads((out / "checkpoint" / "state.json").read_text())
    r_kill = last_round(out)
    t_kill = time.monotonic()
    how = _crash(agg)
    _wait("the aggregator restarted", lambda: _restarted(agg), 300, every_s=0.5)
    t_up = time.monotonic()
    nxt = _round_after(out, r_kill, 600)
    t_back = time.monotonic()
    figures["aggregator"] = (
        f"{how} after round {r_kill} (checkpoint of round {checkpoint['round']}); container up "
        f"in {t_up - t_kill:.1f} s; round {nxt['round']} recorded {t_back - t_kill:.1f} s "
        f"after the kill"
    )
    _wait(
        "Prometheus to see the restarted aggregator",
        lambda: _metric(prom, 'process_start_time_seconds{job="aggregator"}') > start_before,
        120,
    )

    # the run completes
    summary_path = out / "summary.json"
    summary = _wait(
        "summary.json", lambda: summary_path.exists() and json.loads(summary_path.read_text()),
        timeout_s=1200, every_s=2,
    )  # fmt: skip
    total_s = time.monotonic() - t_start
    logs = _run([*stack["cmd"], "logs", "--no-color", "aggregator"], env=stack["env"], check=False)
    cut = re.findall(r"upload of (site-\d+) cut at .*", logs.stdout)
    figures["mid-upload"] = (
        f"aggregator logged a cut upload: {cut[:3] or 'none (killed before or after the stream)'}"
    )
    print(f"run of {ROUNDS} rounds with 4 faults: {total_s:.0f} s from round 2 to the summary")
    assert summary["status"] == "done", summary

    # every round once, consecutive, in both records
    rows = run_rows(out)
    assert [int(r["round"]) for r in rows] == list(range(1, ROUNDS + 1)), rows
    decisions = run_decisions(out)
    assert [d["round"] for d in decisions] == list(range(1, ROUNDS + 1))

    # every accepted delta in its round's FedAvg exactly once
    clean = [r for r, d in zip(rows, decisions, strict=True) if not d["failed_sites"]]
    model_bytes = int(clean[0]["bytes_down"]) // int(clean[0]["k"])
    # deltas cross as int8, the deployment's default: about a quarter of the model's bytes
    delta_bytes = int(clean[0]["bytes_up"]) // int(clean[0]["k"])
    assert delta_bytes < model_bytes / 3, (delta_bytes, model_bytes)
    for row, d in zip(rows, decisions, strict=True):
        accepted = int(row["k"]) - len(d["failed_sites"])
        assert accepted >= 1, (row, d)
        assert int(row["bytes_up"]) == accepted * delta_bytes, (row, d)
        assert int(row["bytes_down"]) == accepted * model_bytes, (row, d)

    # no round aggregated twice or lost across the resume
    final = json.loads((out / "checkpoint" / "state.json").read_text())
    assert final["round"] == ROUNDS and final["model_version"] == ROUNDS, final
    # ... and its model is exactly the FedAvg of the accepted deltas, round by round
    figures["audit"] = verify(stack["audit"], out)

    # each fault left its mark
    assert any("fallback" in json.dumps(d["explanation"]) for d in decisions)
    for service in ("site-worker", "aggregator"):
        counts = [int(_inspect(c, "{{.RestartCount}}")) for c in _ids(stack, service)]
        assert sum(counts) >= 1, (service, counts)
    assert list(out.parent.glob("chaos.finished-*")) == []  # the restart resumed, no new run

"""Google PowerData traces: parsing, interpolation, spare power -> effective GPUs."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from powertrip.core.power import (
    DomainTrace,
    SitePowerTrace,
    TraceError,
    assign_traces,
    load_domains,
)


def test_the_shipped_cell_a_trace_loads():
    domains = load_domains()
    assert [d.name for d in domains] == ["pdu6", "pdu7", "pdu8", "pdu9", "pdu10"]
    assert all(len(d.utilisation) == 8928 for d in domains)
    # README: pdu6 mean utilisation 0.7153
    assert domains[0].utilisation.mean() == pytest.approx(0.7153, abs=1e-4)


def test_interpolation_between_samples_and_wrap():
    d = DomainTrace("x", np.array([0.2, 0.6, 0.4]))
    assert d.spare_at(0) == pytest.approx(0.8)
    assert d.spare_at(150) == pytest.approx(1 - 0.4)  # half-way between 0.2 and 0.6
    assert d.spare_at(300) == pytest.approx(0.4)
    assert d.spare_at(750) == pytest.approx(1 - 0.3)  # half-way 0.4 -> 0.2 (wraps)
    assert d.spare_at(900) == pytest.approx(0.8)  # one full period later


def test_spare_power_maps_to_effective_gpus():
    d = DomainTrace("x", np.array([0.7, 0.7]))  # spare 0.3
    site = SitePowerTrace(d, 0.0, gpus_available=32, gpus_max=32)
    assert site.effective_gpus_at(0) == 9  # floor(0.3 * 32)
    assert site.power_fraction_at(0) == pytest.approx(9 / 32)
    few = SitePowerTrace(d, 0.0, gpus_available=4, gpus_max=32)
    assert few.effective_gpus_at(0) == 4  # capped by the inventory


def test_sites_see_power_change_over_time():
    sites = assign_traces(load_domains(), 20, seed=1, gpus_per_site=32)
    again = assign_traces(load_domains(), 20, seed=1, gpus_per_site=32)
    assert [s.offset_s for s in sites] == [s.offset_s for s in again]
    changed = [s for s in sites if s.power_fraction_at(0) != s.power_fraction_at(6 * 3600)]
    assert changed, "six hours later at least one site's power should differ"
    for s in sites:
        assert 0.15 <= s.power_fraction_at(0) <= 0.45  # cell a: spare 21-39 %


def test_malformed_traces_name_the_problem(tmp_path):
    with pytest.raises(TraceError, match="not found"):
        load_domains(tmp_path / "none.csv.gz")
    bad = tmp_path / "bad.csv"
    bad.write_text("step,pdu,measured_power_util\n0,p,0.5\n1,p,1.7\n")
    with pytest.raises(TraceError, match="line 3"):
        load_domains(bad)
    cols = tmp_path / "cols.csv"
    cols.write_text("step,util\n0,0.5\n")
    with pytest.raises(TraceError, match="missing column"):
        load_domains(cols)
    trunc = tmp_path / "t.csv.gz"
    trunc.write_bytes(gzip.compress(b"step,pdu,measured_power_util\n0,p,0.5\n" * 100)[:40])
    with pytest.raises(TraceError, match="unreadable or truncated"):
        load_domains(trunc)


def test_domains_carry_their_cell_and_sites_are_cells_where_there_are_cells(tmp_path):
    from powertrip.core.power import trace_sites

    shipped = load_domains()  # cell a only: its PDUs, labelled
    assert {d.cell for d in shipped} == {"a"}
    sites = trace_sites(shipped)
    assert [s.label for s in sites] == [f"cell a / pdu{n}" for n in range(6, 11)]
    assert {s.level for s in sites} == {"pdu"}
    two = tmp_path / "two.csv"
    two.write_text(
        "step,cell,pdu,measured_power_util\n"
        "0,a,pdu1,0.2\n1,a,pdu1,0.4\n0,a,pdu2,0.6\n1,a,pdu2,0.8\n0,b,pdu3,0.5\n1,b,pdu3,0.5\n"
    )
    cells = trace_sites(load_domains(two))
    assert [(s.label, s.level) for s in cells] == [("cell a", "cell"), ("cell b", "cell")]
    assert cells[0].utilisation.tolist() == pytest.approx([0.4, 0.6])  # mean of its PDUs

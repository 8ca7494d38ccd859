"""Each policy declares its parameters beside it (a frozen dataclass of `param` fields), and
the declarations are what checks a value, what a run writes and what the listing prints."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from powertrip.core.config import RunConfig
from powertrip.core.policies import REGISTRY, PolicyError, PolicyParams, get_policy
from powertrip.core.policies.params import Bounds, param


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_policy_declares_its_parameters_as_a_frozen_dataclass_with_docs(name):
    cls = REGISTRY[name].Params
    assert dataclasses.is_dataclass(cls) and issubclass(cls, PolicyParams)
    assert cls.__dataclass_params__.frozen
    defaults = cls()
    with pytest.raises(dataclasses.FrozenInstanceError):
        defaults.anything = 1  # type: ignore[attr-defined]
    for spec in cls.specs():
        assert spec.doc.strip(), f"{name}.{spec.name} has no doc"
        # the annotation says what the declaration says: whole numbers are int, None allowed
        # exactly where it means something
        field_type = next(f.type for f in dataclasses.fields(cls) if f.name == spec.name)
        assert field_type.split(" | ")[0] == spec.kind, (name, spec.name, field_type)
        assert ("None" in field_type) == bool(spec.bounds.none), (name, spec.name)
        # every default is a value its own check takes
        if spec.default is not None:
            assert cls.parse(name, {spec.name: spec.default}) == defaults


@pytest.mark.parametrize("name", list(REGISTRY))
def test_an_out_of_range_value_is_refused_naming_the_policy_the_parameter_and_the_range(name):
    for spec in REGISTRY[name].Params.specs():
        b = spec.bounds
        bad = (
            b.at_least - 1
            if b.at_least is not None
            else b.above
            if b.above is not None
            else b.at_most + 1
        )
        if b.none and bad == 0:
            bad = -1  # 0 is how a stored run writes None
        with pytest.raises(PolicyError) as info:
            get_policy(name, {spec.name: bad})  # refused where the policy is built
        message = str(info.value)
        assert message.startswith(f"policy {name!r}: {spec.name} must be {b.allowed()}"), message
        assert message.endswith(f"got {bad:g}")


def test_a_parameter_with_one_name_means_the_same_everywhere():
    """What PARAM_RULES held in one table: `k` of static and `k` of oort take the same values."""
    seen: dict[str, tuple[str, Bounds]] = {}
    for name, cls in REGISTRY.items():
        for spec in cls.Params.specs():
            kept = seen.setdefault(spec.name, (name, spec.bounds))
            other = dataclasses.replace(kept[1], doc=spec.doc, none=spec.bounds.none)
            assert other == spec.bounds, f"{spec.name}: {kept[0]} and {name} disagree"


def test_unset_is_none_and_a_stored_zero_reads_as_unset():
    p = get_policy("powertrip").check_params({})
    assert p.k0 is None and p.window is None and p.patience == 3
    assert get_policy("powertrip").check_params({"k0": 0.0, "window": 0}) == p
    assert get_policy("powertrip").check_params({"k0": None}) == p
    assert get_policy("powertrip").check_params({"k0": 4.0}).k0 == 4
    assert isinstance(get_policy("powertrip").check_params({"k0": 4.0}).k0, int)
    adaptive = get_policy("adaptive").check_params({"stall_rounds": 0})
    assert adaptive.stall_rounds is None and adaptive.ceiling_rounds == 30
    # a parameter that takes no None is not unset by 0 or by null
    assert get_policy("adaptive").check_params({"probe_backoff": 0}).probe_backoff == 0
    with pytest.raises(PolicyError, match="policy 'radius': radius_miles must be >= 0, got none"):
        get_policy("radius").check_params({"radius_miles": None})


def test_what_a_run_writes_is_what_stored_runs_wrote_and_reads_back_the_same(tmp_path):
    """Unset as 0 in config.yaml, as every stored run has it: a stored run compares equal to
    the run asked for today (reproduce reuses it) and replays as it ran."""
    written = RunConfig(policy="highest-power").to_dict()["policy_params"]
    assert written == {
        "k0": 0.0, "window": 0.0, "patience": 3.0, "trend_rounds": 3.0, "m_ref_gb": 1.5,
        "below_share": 1.0, "k": 0.0,
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    RunConfig(policy="highest-power").write_yaml(path)
    stored = yaml.safe_load(path.read_text())["policy_params"]
    assert stored == written
    policy = get_policy("highest-power")
    assert policy.check_params(stored) == policy.check_params({})
    assert policy.check_params(stored).k is None  # PowerTrip's rule chooses k


def test_the_constructor_checks_its_overrides_and_a_request_starts_from_them():
    policy = get_policy("static", {"k": 4})
    assert policy.check_params({}).k == 4 and policy.check_params({"k": 2}).k == 2
    with pytest.raises(PolicyError, match=r"policy 'static': unknown parameter\(s\) kk"):
        get_policy("static", {"kk": 4})
    with pytest.raises(PolicyError, match="policy 'static': k: 'many' is not a number"):
        get_policy("static", {"k": "many"})


def test_an_alias_moves_a_default_and_keeps_the_declaration():
    quarter, half = REGISTRY["centralized-25"].Params, REGISTRY["centralized-50"].Params
    assert quarter().power_cap == 0.25 and half().power_cap == 0.5
    assert quarter.specs()[0].bounds == half.specs()[0].bounds
    with pytest.raises(TypeError, match="no parameter"):
        quarter.with_defaults(nope=1)


def test_a_parameter_that_takes_none_may_not_admit_zero():
    with pytest.raises(TypeError, match="must not admit 0"):
        param(None, "a count", whole=True, at_least=0, none="auto")

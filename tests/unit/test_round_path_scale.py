"""The per-round control path at many sites (issue 19) computes what it computed before:
the profiler's template and vectorised trace power, the static policy's lookup of round 1's
set, the aggregator's row lookup and dead-site marking, and a checkpoint whose profiles
live in a side file written only when they change."""

from __future__ import annotations

import json

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from powertrip.core import runfiles
from powertrip.core.config import RunConfig
from powertrip.core.policies import Context, SiteTable, get_policy
from powertrip.core.policies.base import PastRound
from powertrip.rpc.runsettings import settings_of
from powertrip.rpc.sitecolumns import row_of
from powertrip.v1 import common_pb2, policy_pb2, profiler_pb2
from services.aggregator.checkpoint_store import CheckpointError, CheckpointStore
from services.aggregator.control_client import ControlClient, profiles_of
from services.aggregator.metrics import AggregatorMetrics
from services.aggregator.records import WALL_HEADER, WallTimes
from services.aggregator.run_result import CheckpointRecord, LoopResult
from services.aggregator.state import AggregatorState
from services.profiler.config import ProfilerConfig
from services.profiler.profile_book import Measured, ProfileBook
from services.profiler.servicer import ProfilerMetrics, ProfilerServicer


def _profiler(
    num_sites: int, power: str
) -> tuple[ProfileBook, ProfilerServicer, CollectorRegistry]:
    run = RunConfig(workload="synthetic", num_sites=num_sites, power=power, seed=5)
    book = ProfileBook(ProfilerConfig.from_run_config(run))
    registry = CollectorRegistry()
    return book, ProfilerServicer(book, ProfilerMetrics(registry)), registry


@pytest.mark.parametrize("power", ["uniform", "trace"])
def test_every_sites_profiles_are_the_per_site_computation(power):
    book, servicer, registry = _profiler(3_000, power)
    book.add_sample("site-007", Measured(0.01, 2e8, 0.02, 1 << 20))  # one probed link
    for at_s in (0.0, 299.9, 86_400.5, 3.1e7):
        reply = servicer.GetProfiles(
            profiler_pb2.GetProfilesRequest(at_s=at_s, columnar=True), None
        )
        expected = servicer._columns(book.sites, at_s)  # one site at a time, as before
        assert reply.columns.SerializeToString() == expected.SerializeToString(), at_s
        assert reply.columns.measured_latency_s[7] == 0.01
        for site in (book.sites[0], book.sites[2_999]):  # the gauge follows the last call
            shown = registry.get_sample_value("powertrip_site_power_ratio", {"site": site.site_id})
            assert shown == book.power_at(site, at_s)


def test_trace_power_for_all_sites_is_bit_identical_to_one_site_at_a_time():
    book, _, _ = _profiler(5_000, "trace")
    rng = np.random.default_rng(1)
    for at_s in [0.0, 0.5, 300.0, 2_678_399.9, *rng.uniform(0, 1e9, 10).tolist()]:
        power, gpus = book._trace_power.at(at_s)
        assert power.tolist() == [book.power_at(site, at_s) for site in book.sites], at_s
        assert gpus.tolist() == [book.gpus_at(site, at_s) for site in book.sites], at_s


def _static_before(ctx: Context, k: int, ranked: np.ndarray) -> list[int]:
    """The static policy's set from round 2 on as it was computed before: a dict over every id."""
    first = ctx.history[0].site_ids
    index = {site: i for i, site in enumerate(ctx.table.ids.tolist())}
    alive = ctx.table.alive
    kept = [index[s] for s in first if s in index and alive[index[s]]][:k]
    taken = set(kept)
    return kept + [int(i) for i in ranked if int(i) not in taken][: k - len(kept)]


@pytest.mark.parametrize("seed", range(6))
def test_static_keeps_round_1s_set_as_before(seed):
    rng = np.random.default_rng(seed)
    n = 400
    ids = [f"site-{i:03d}" for i in rng.permutation(n)]  # not in id order
    alive = rng.random(n) > 0.2
    table = SiteTable.build(
        ids=ids,
        power=rng.uniform(0.1, 1, n),
        distance_miles=rng.uniform(100, 10_000, n),
        latency_s=rng.uniform(0.001, 0.05, n),
        bandwidth_bytes_per_s=rng.uniform(1e7, 1e9, n),
        update_size_bytes=1.5e9,
        alive=alive,
    )
    k = int(rng.integers(1, 60))
    first = [ids[i] for i in rng.choice(n, size=k, replace=False)] + ["site-999", "nope"]
    rng.shuffle(first)
    ctx = Context(
        table=table, update_size_bytes=1.5e9, tau_s=60.0, params={"k": float(k)},
        history=(PastRound(1, k, 0.1, 10.0, tuple(first)),),
    )  # fmt: skip
    policy = get_policy("static")
    ranked, _ = policy.rank(ctx, policy.params(ctx))
    decision = policy.select(ctx)
    assert decision.order.tolist() == _static_before(ctx, k, ranked)
    assert table.rows_of(["site-999", ids[3], "x"]).tolist() == [-1, 3, -1]


def test_site_rows_finds_what_a_full_map_finds():
    ids = [f"site-{i:03d}" for i in range(50)]
    shuffled = list(np.random.default_rng(0).permutation(ids))
    for order in (ids, shuffled, ["other", *ids]):
        columns = profiles_of(common_pb2.SiteColumns(site_id=order))
        wanted = ["site-049", "site-000", "site-017", "site-999", "bogus"]
        full = row_of(common_pb2.SiteColumns(site_id=order))
        assert columns.rows_of(wanted) == {s: full[s] for s in wanted if s in full}


def test_dead_sites_are_marked_in_a_copy_and_only_when_there_are_any():
    columns = profiles_of(
        common_pb2.SiteColumns(site_id=[f"site-{i:03d}" for i in range(5)], alive=[True] * 5)
    )
    state = AggregatorState(list(columns.site_id))
    state.registry.register("w0", ["site-000", "site-001"], 0)
    # sites no worker hosts yet (a run started with --min-sites) are hidden too
    assert list(state.registry.hide_dead(columns).alive) == [True, True, False, False, False]
    state.registry.register("w1", ["site-002", "site-003", "site-004"], 0)
    assert state.registry.hide_dead(columns) is columns
    state.registry.restore_dead(["site-003", "site-001"])
    marked = state.registry.hide_dead(columns)
    assert list(marked.alive) == [True, False, True, False, True]
    assert list(columns.alive) == [True] * 5  # the last good profiles stay as they were


def _columns(power: float) -> common_pb2.SiteColumns:
    return common_pb2.SiteColumns(
        site_id=["site-000", "site-001"], power_fraction=[power, 0.5],
        distance_miles=[10, 20], latency_s=[0.001, 0.002], bandwidth_bytes_per_s=[1e9, 1e8],
        alive=[True, True], power_source="uniform",
    )  # fmt: skip


def _client(run: RunConfig | None = None) -> ControlClient:
    return ControlClient(run or RunConfig(workload="synthetic", num_sites=2),
                         AggregatorMetrics(CollectorRegistry()))  # fmt: skip


def _replies(selection, columns) -> tuple[bytes | None, bytes | None]:
    """What a control client holding `selection` and `columns` hands a checkpoint."""
    client = _client()
    client.restore(
        None if selection is None else selection.SerializeToString(), columns.SerializeToString()
    )
    return client.checkpoint_replies()


def _record(round_no: int, weights, selection: bytes | None, profiles: bytes | None):
    """A checkpoint record of round `round_no` holding a control client's replies."""
    return CheckpointRecord(
        round_no, round_no, weights, LoopResult(), last_selection=selection, last_profiles=profiles
    )


def _resumed(record) -> ControlClient:
    """A control client resumed from the checkpoint `record`."""
    client = _client()
    client.restore_checkpoint(record)
    return client


def test_checkpoint_profiles_go_to_a_side_file_written_when_they_change(tmp_path):
    store = CheckpointStore(tmp_path, RunConfig(workload="synthetic", num_sites=2))
    weights = {"w": np.arange(4, dtype=np.float32)}
    selection = policy_pb2.Selection(policy="random", site_ids=["site-001"], k=1)
    selection.shadows.add(policy="all", k=2, site_ids=["site-000", "site-001"])
    ckpt = tmp_path / runfiles.CHECKPOINT_DIR

    store.save(_record(1, weights, *_replies(selection, _columns(0.25))))
    store.flush()  # written in the background
    (first,) = ckpt.glob("profiles-*.pb")
    written = first.stat().st_mtime_ns
    store.save(_record(2, weights, *_replies(selection, _columns(0.25))))
    store.flush()
    assert [p.name for p in ckpt.glob("profiles-*.pb")] == [first.name]
    assert first.stat().st_mtime_ns == written  # unchanged profiles: not written again
    resumed = _resumed(store.load(weights))
    assert resumed._last_columns == _columns(0.25)
    assert resumed.last_profiles.power_fraction.tolist() == [0.25, 0.5]
    assert list(resumed.last_selection.site_ids) == ["site-001"]
    assert not resumed.last_selection.shadows  # nothing reads them back

    store.save(_record(3, weights, *_replies(selection, _columns(0.75))))
    store.flush()
    (changed,) = ckpt.glob("profiles-*.pb")
    assert changed.name != first.name
    assert _resumed(store.load(weights))._last_columns == _columns(0.75)
    changed.write_bytes(changed.read_bytes()[:-1])
    with pytest.raises(CheckpointError, match="SHA-256"):
        store.load(weights)


def test_a_checkpoint_with_inline_profiles_still_loads(tmp_path):
    """Checkpoints written before the side file carry the profiles in state.json."""
    import base64

    store = CheckpointStore(tmp_path, RunConfig(workload="synthetic", num_sites=2))
    weights = {"w": np.arange(4, dtype=np.float32)}
    store.save(_record(1, weights, *_replies(None, _columns(0.5))))
    store.flush()
    state_path = tmp_path / runfiles.CHECKPOINT_DIR / "state.json"
    state = json.loads(state_path.read_text())
    del state["last_profiles_file"], state["last_profiles_sha256"]
    reply = profiler_pb2.GetProfilesResponse(columns=_columns(0.5))
    state["last_profiles"] = base64.b64encode(reply.SerializeToString()).decode()
    state_path.write_text(json.dumps(state, indent=1))
    assert _resumed(store.load(weights))._last_columns == _columns(0.5)


def test_wall_csv_has_the_schemas_columns_and_the_overhead_sums_its_phases():
    assert WALL_HEADER.strip().split(",") == list(runfiles.WALL_COLUMNS)
    assert runfiles.WALL_COLUMNS[:4] == ("round", "wall_round_s", "wall_train_s", "wall_eval_s")
    wall = WallTimes(
        round_s=2.0, train_s=1.5, eval_s=0.4, profiles_s=0.01, select_s=0.02,
        dispatch_s=0.003, collect_s=1.4, aggregate_s=0.004, record_s=0.005,
    )  # fmt: skip
    assert wall.overhead_s == pytest.approx(0.042)
    assert wall.cells()[:3] == ["2.000", "1.500", "0.400"]
    assert len(wall.cells()) == len(runfiles.WALL_COLUMNS) - 1


def _profiles_reply(num_sites: int) -> bytes:
    book, servicer, _ = _profiler(num_sites, "uniform")
    reply = servicer.GetProfiles(profiler_pb2.GetProfilesRequest(at_s=0, columnar=True), None)
    return reply.SerializeToString()


def test_the_profilers_table_bytes_go_into_the_request_as_the_same_message():
    run = RunConfig(workload="synthetic", num_sites=300, policy="static")
    client = _client(run)
    raw = _profiles_reply(300)
    client._parse_profiles(raw)
    columns = client._last_columns
    assert columns == profiler_pb2.GetProfilesResponse.FromString(raw).columns
    request = policy_pb2.SelectSitesRequest(
        policy="static", round=2, settings=settings_of({"seed": 4, "shadow": True})
    )
    request.history.add(round=1, k=3, site_ids=["site-001", "site-007", "site-002"])
    expected = policy_pb2.SelectSitesRequest()
    expected.CopyFrom(request)
    expected.site_columns.CopyFrom(columns)

    def fresh() -> policy_pb2.SelectSitesRequest:
        return policy_pb2.SelectSitesRequest.FromString(request.SerializeToString())

    spliced = client._request_bytes(fresh(), client.last_profiles)
    assert policy_pb2.SelectSitesRequest.FromString(spliced) == expected
    # a table with dead sites marked is a copy: serialized the ordinary way
    marked = common_pb2.SiteColumns()
    marked.CopyFrom(columns)
    marked.alive[5] = False
    dead = client.last_profiles.with_dead([5])
    plain = policy_pb2.SelectSitesRequest.FromString(client._request_bytes(fresh(), dead))
    assert plain.site_columns == marked and plain.history == expected.history


def test_the_table_is_found_in_the_reply_or_the_parsed_route_is_taken():
    from services.aggregator.columns import embedded_field, encode_varint, with_embedded

    raw = _profiles_reply(50)
    table = embedded_field(raw, 4, give_up_on=1)
    reply = profiler_pb2.GetProfilesResponse.FromString(raw)
    assert common_pb2.SiteColumns.FromString(bytes(table)) == reply.columns
    # one message per site (an older profiler): not walked, the caller parses instead
    old = profiler_pb2.GetProfilesResponse(sites=[common_pb2.SiteProfile(site_id="site-000")])
    assert embedded_field(old.SerializeToString(), 4, give_up_on=1) is None
    twice = raw + with_embedded(b"", 4, b"")  # a second copy of the field: parsers merge
    assert embedded_field(twice, 4, give_up_on=1) is None
    with pytest.raises(ValueError):
        embedded_field(raw[:-3], 4, give_up_on=1)
    for value in (0, 1, 127, 128, 300, 2**35):
        assert int.from_bytes(encode_varint(value)[-1:], "little") < 128
    assert encode_varint(300) == b"\xac\x02"


def test_a_long_site_list_goes_to_a_worker_as_a_count():
    from powertrip.app.experiments.runner import MAX_SITES_ARG_BYTES, site_args
    from powertrip.core.profiles import site_id

    few = [site_id(i) for i in range(0, 100, 2)]
    assert site_args(few) == ["--sites", ",".join(few)]
    many = [site_id(i) for i in range(20_000)]
    assert len(",".join(many)) > MAX_SITES_ARG_BYTES
    assert site_args(many) == ["--site-count", "20000"]
    assert MAX_SITES_ARG_BYTES < 128 * 1024  # Linux's limit on one argument (MAX_ARG_STRLEN)


def test_a_checkpoint_is_written_from_copies_taken_when_it_was_saved(tmp_path):
    """The write runs while the next round does: arrays the round changes after save()
    returns must not reach the file."""
    store = CheckpointStore(tmp_path, RunConfig(workload="synthetic", num_sites=2))
    weights = {"w": np.arange(4, dtype=np.float32)}
    store.save(_record(1, weights, None, None))
    weights["w"][:] = -1.0  # the next round reuses the buffer before the write lands
    store.flush()
    with np.load(next((tmp_path / runfiles.CHECKPOINT_DIR).glob("model-*.npz"))) as saved:
        assert saved["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("optimizer", ["nesterov", "fedavgm"])
def test_the_outer_buffer_survives_a_checkpoint_and_the_run_goes_on_to_the_same_bytes(
    tmp_path, optimizer
):
    """A momentum step's buffer goes to a side file and comes back byte for byte: three
    rounds straight through equal two, a checkpoint, a load and the third."""
    from powertrip.core.outer import outer_of, outer_update

    run = RunConfig(workload="synthetic", num_sites=2, outer_optimizer=optimizer)
    step = outer_of(run)
    rng = np.random.default_rng(3)
    start = {"w": rng.normal(size=(3, 4)).astype(np.float32), "n": np.array([1], np.int64)}
    deltas = [
        {"w": rng.normal(size=(3, 4)).astype(np.float32), "n": np.array([1], np.int64)}
        for _ in range(3)
    ]
    straight, buffer = start, None
    for delta in deltas:
        straight, buffer = outer_update(straight, delta, buffer, step)

    weights, buffer = start, None
    for delta in deltas[:2]:
        weights, buffer = outer_update(weights, delta, buffer, step)
    store = CheckpointStore(tmp_path, run)
    store.save(CheckpointRecord(2, 2, weights, LoopResult(), outer_buffer=buffer))
    store.flush()
    loaded = store.load(start)
    assert loaded is not None and set(loaded.outer_buffer) == {"w"}  # floats only
    assert loaded.outer_buffer["w"].tobytes() == buffer["w"].tobytes()
    resumed, _ = outer_update(loaded.weights, deltas[2], loaded.outer_buffer, step)
    assert all(resumed[k].tobytes() == straight[k].tobytes() for k in straight)

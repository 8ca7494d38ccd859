"""The services over real gRPC on loopback: health, reflection, and the aggregator's
protocol driven by a hand-written worker (bad deltas rejected, good ones aggregated)."""

from __future__ import annotations

import csv
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel
from powertrip.rpc.sitecolumns import profiles_from_columns
from powertrip.rpc.tensors import encode_tensors
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc, profiler_pb2, profiler_pb2_grpc


def _listed_services(target: str) -> list[str]:
    with open_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        return [s.name for reply in replies for s in reply.list_services_response.service]


def _health(target: str) -> int:
    with open_channel(target) as channel:
        return (
            health_pb2_grpc.HealthStub(channel)
            .Check(health_pb2.HealthCheckRequest(), timeout=5)
            .status
        )


@pytest.fixture()
def run_config(tmp_path):
    config = RunConfig(
        workload="synthetic",
        num_sites=2,
        max_rounds=2,
        seed=3,
        policy="all",
        target_accuracy=0.999,
        round_deadline_s=60,
        outer_optimizer="fedavg",  # the tests send raw deltas and check their plain average
        delta_encoding="fp32",
    )
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    return path


def test_each_service_is_healthy_and_reflects_its_contract(
    service_factory, stack_factory, run_config, tmp_path
):
    profiler, policy, aggregator = stack_factory(run_config, tmp_path / "run")
    worker = service_factory(
        "site_worker", "--aggregator", "127.0.0.1:1", "--sites", "site-000", wait_serving=True
    )
    for service, name in (
        (profiler, "Profiler"),
        (policy, "Policy"),
        (aggregator, "Aggregator"),
        (worker, "SiteWorker"),
    ):
        assert _health(service.target) == health_pb2.HealthCheckResponse.SERVING
        names = _listed_services(service.target)
        assert f"powertrip.v1.{name}" in names, names
        assert "grpc.health.v1.Health" in names


def test_port_in_use_is_reported(service_factory, run_config):
    profiler = service_factory("profiler", "--config", str(run_config))
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.profiler",
            "--host",
            "127.0.0.1",
            "--port",
            str(profiler.port),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "cannot bind" in done.stderr


def test_profiler_serves_the_seeded_population(service_factory, run_config):
    profiler = service_factory(
        "profiler", "--config", str(run_config), "--sites", "50", "--seed", "9"
    )
    with open_channel(profiler.target) as channel:
        reply = profiler_pb2_grpc.ProfilerStub(channel).GetProfiles(
            profiler_pb2.GetProfilesRequest(), timeout=5
        )
    assert len(reply.sites) == 50
    distances = np.array([s.distance_miles for s in reply.sites])
    powers = np.array([s.power_fraction for s in reply.sites])
    bandwidth = np.array([s.bandwidth_bytes_per_s for s in reply.sites])
    assert distances.min() >= 100 and distances.max() <= 10_000
    assert powers.min() >= 0.1 and powers.max() <= 1.0
    # bandwidth is inversely proportional to distance
    np.testing.assert_allclose(bandwidth * distances, bandwidth[0] * distances[0], rtol=1e-9)


def _trace_profiler(service_factory, tmp_path, num_sites: int, seed: int):
    """A profiler serving `num_sites` sites whose power follows the Google traces."""
    config = RunConfig(workload="synthetic", num_sites=num_sites, seed=seed, power="trace")
    path = tmp_path / "trace.yaml"
    config.write_yaml(path)
    return service_factory("profiler", "--config", str(path))


def test_profiler_answers_in_columns_what_it_answers_in_messages(service_factory, tmp_path):
    """`columnar` changes the form only: the same sites, values and order (trace power at a
    later time, so power and effective GPUs are not the initial draw)."""
    profiler = _trace_profiler(service_factory, tmp_path, num_sites=40, seed=2)
    with open_channel(profiler.target) as channel:
        stub = profiler_pb2_grpc.ProfilerStub(channel)
        messages = stub.GetProfiles(profiler_pb2.GetProfilesRequest(at_s=7200), timeout=5)
        columns = stub.GetProfiles(
            profiler_pb2.GetProfilesRequest(at_s=7200, columnar=True), timeout=5
        )
    assert len(columns.sites) == 0 and len(messages.sites) == 40
    assert profiles_from_columns(columns.columns) == list(messages.sites)
    assert len(columns.columns.measured_latency_s) == 0  # nothing probed yet: left empty


def _worker_session(stub):
    reply = stub.Register(
        aggregator_pb2.RegisterRequest(worker_id="test-worker", site_ids=["site-000", "site-001"]),
        timeout=10,
    )
    return reply


def _wait_tasks(stub, session):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        polled = stub.NextTask(
            aggregator_pb2.NextTaskRequest(
                worker_id="test-worker", wait_s=2, session_token=session
            ),
            timeout=10,
        )
        if polled.tasks:
            return list(polled.tasks)
    raise AssertionError("no tasks")


def _upload(stub, header, arrays):
    def messages():
        yield aggregator_pb2.UploadDeltaRequest(header=header)
        for chunk in encode_tensors(arrays):
            yield aggregator_pb2.UploadDeltaRequest(chunk=chunk)

    return stub.UploadDelta(messages(), timeout=30)


def test_bad_deltas_are_rejected_and_good_ones_aggregated(stack_factory, run_config, tmp_path):
    _, _, aggregator = stack_factory(run_config, tmp_path / "run", "--metrics-port", "0")
    with open_channel(aggregator.target) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        reg = _worker_session(stub)
        session = reg.session_token
        tasks = _wait_tasks(stub, session)
        assert {t.site_id for t in tasks} == {"site-000", "site-001"}
        model = {}
        from powertrip.rpc.tensors import TensorAssembler

        assembler = TensorAssembler()
        for chunk in stub.DownloadModel(
            aggregator_pb2.DownloadModelRequest(
                worker_id="test-worker", model_version=tasks[0].model_version, session_token=session
            ),
            timeout=30,
        ):
            assembler.add(chunk)
        model = assembler.finish()

        def header(task, **kw):
            fields = dict(
                task_id=task.task_id,
                site_id=task.site_id,
                round=task.round,
                model_version=task.model_version,
                num_samples=10,
                worker_id="test-worker",
                session_token=session,
            )
            fields.update(kw)
            return aggregator_pb2.DeltaHeader(**fields)

        zeros = {k: np.zeros_like(v) for k, v in model.items()}
        first_key = next(iter(model))
        cases = [
            (
                dict(zeros, **{first_key: np.zeros((3, 3), np.float32)}),
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (
                dict(zeros, **{first_key: zeros[first_key].astype(np.float64)}),
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (
                dict(zeros, **{first_key: np.full_like(zeros[first_key], np.nan)}),
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (zeros, {"session_token": "forged"}, grpc.StatusCode.UNAUTHENTICATED),
            (zeros, {"round": 7}, grpc.StatusCode.FAILED_PRECONDITION),
            (zeros, {"site_id": "site-099"}, grpc.StatusCode.NOT_FOUND),
        ]
        for arrays, overrides, code in cases:
            with pytest.raises(grpc.RpcError) as info:
                _upload(stub, header(tasks[0], **overrides), arrays)
            assert info.value.code() == code, info.value.details()

        # a well-formed delta of +1 for one site and 0 for the other, weights 10 and 30
        ones = {k: np.ones_like(v) for k, v in model.items()}
        assert _upload(stub, header(tasks[0], num_samples=10), ones).accepted
        with pytest.raises(grpc.RpcError) as info:  # duplicate
            _upload(stub, header(tasks[0], num_samples=10), ones)
        assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert _upload(stub, header(tasks[1], num_samples=30), zeros).accepted

        # next round's model = old + (1*10 + 0*30) / 40
        tasks2 = _wait_tasks(stub, session)
        assembler = TensorAssembler()
        for chunk in stub.DownloadModel(
            aggregator_pb2.DownloadModelRequest(
                worker_id="test-worker",
                model_version=tasks2[0].model_version,
                session_token=session,
            ),
            timeout=30,
        ):
            assembler.add(chunk)
        new_model = assembler.finish()
        for key in model:
            np.testing.assert_allclose(new_model[key], model[key] + 0.25, rtol=1e-6, atol=1e-6)
        for task in tasks2:
            _upload(stub, header(task), zeros)
    # the run finishes (2 rounds) and records it
    deadline = time.monotonic() + 60
    while (
        aggregator.alive()
        and not (tmp_path / "run" / "summary.json").exists()
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    rows = list(csv.DictReader((tmp_path / "run" / "rounds.csv").open()))
    assert len(rows) == 2


def test_trace_power_changes_between_rounds(service_factory, tmp_path):
    profiler = _trace_profiler(service_factory, tmp_path, num_sites=30, seed=1)
    with open_channel(profiler.target) as channel:
        stub = profiler_pb2_grpc.ProfilerStub(channel)
        early = stub.GetProfiles(profiler_pb2.GetProfilesRequest(at_s=0), timeout=5)
        later = stub.GetProfiles(profiler_pb2.GetProfilesRequest(at_s=4 * 3600), timeout=5)
    assert early.power_mode == "trace"
    before = np.array([s.power_fraction for s in early.sites])
    after = np.array([s.power_fraction for s in later.sites])
    assert (before != after).any()
    assert before.min() > 0 and before.max() < 0.5  # cell a: 21-39 % spare
    assert all(s.power_source == "trace" for s in early.sites)
    assert all(s.gpus_effective == round(s.power_fraction * 32) for s in early.sites)

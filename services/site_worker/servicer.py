"""The worker's own small gRPC server (status for operators; health and reflection)."""

from __future__ import annotations

from powertrip.v1 import site_worker_pb2, site_worker_pb2_grpc
from services.site_worker.worker import SiteWorker

SERVICE_NAME = site_worker_pb2.DESCRIPTOR.services_by_name["SiteWorker"].full_name


class SiteWorkerServicer(site_worker_pb2_grpc.SiteWorkerServicer):
    def __init__(self, worker: SiteWorker):
        self.worker = worker

    def GetWorkerStatus(self, request, context):
        c = self.worker.counters
        return site_worker_pb2.WorkerStatus(
            worker_id=self.worker.config.worker_id,
            site_ids=self.worker.site_ids,
            device=self.worker.config.device,
            tasks_done=c.tasks_done,
            bytes_up=c.bytes_up,
            bytes_down=c.bytes_down,
            aggregator=self.worker.config.aggregator,
            state=c.state,
        )

"""The site worker's Prometheus metrics: what an operator asks of a remote GPU VM (how long
a site's local training takes, how fast its uploads go, how often they resume, the GPU's
power draw), beside the process metrics every service exports.

Names follow Prometheus conventions (`tests/unit/test_metrics_names.py` checks them); the
worker serves them on `--metrics-port` like the other services.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class SiteWorkerMetrics:
    """One set per worker process, on the service's own registry."""

    def __init__(self, registry: CollectorRegistry):
        self.train_seconds = Histogram(
            "powertrip_site_train_seconds",
            "Wall seconds of one site's local training in a round (a batched call's time "
            "split evenly between its sites)",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
            registry=registry,
        )
        self.tasks = Counter(
            "powertrip_site_tasks_total",
            "Site tasks trained and uploaded, by outcome (accepted, rejected)",
            ["outcome"],
            registry=registry,
        )
        self.upload_bytes = Counter(
            "powertrip_site_upload_bytes_total", "Delta bytes uploaded", registry=registry
        )
        self.download_bytes = Counter(
            "powertrip_site_download_bytes_total", "Model bytes downloaded", registry=registry
        )
        self.upload_throughput = Gauge(
            "powertrip_site_upload_bytes_per_second",
            "Throughput of the last accepted upload (its bytes over its wall seconds, "
            "resumes included)",
            registry=registry,
        )
        self.upload_resumes = Counter(
            "powertrip_site_upload_resumes_total",
            "Uploads resumed after their stream broke (UploadStatus, then the rest)",
            registry=registry,
        )
        self.gpu_power = Gauge(
            "powertrip_site_gpu_power_watts",
            "Power draw of every GPU NVML sees, read after each training call (absent "
            "without NVML)",
            registry=registry,
        )
        for outcome in ("accepted", "rejected"):
            self.tasks.labels(outcome)

    def show_upload(self, nbytes: int, seconds: float, resumes: int) -> None:
        self.upload_bytes.inc(nbytes)
        self.upload_resumes.inc(resumes)
        if seconds > 0:
            self.upload_throughput.set(nbytes / seconds)

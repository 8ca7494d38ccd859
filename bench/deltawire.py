"""int8_wire_bytes_ratio, int8_encode_vs_fp32, int8_receive_fedavg_vs_fp32: what int8
deltas (powertrip/core/deltacodec.py) cost and save on the wire (issue #62).

The delta is FEMNIST's LEAF CNN (26 MB in fp32) with Gaussian values. For fp32 and int8,
measured interleaved `--repeat` times:

* the bytes its upload chunks carry (int8 / fp32: the share Eq. 3 charges);
* the site's encode: every UploadDeltaRequest of the upload serialized
  (`chunkwire.encode_chunks`, the worker's fast path), quantization included;
* the aggregator's receive: 20 uploads parsed, checked (checksums, encoding and scale),
  decoded and summed into one StreamingFedAvg, as the upload path does, in fp32-equivalent
  GB per second.

Ratios above 1: int8 is faster. Both run in this one process on its cores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.common import WORKLOAD, median_ratio

UPLOADS = 20


def _delta() -> dict[str, np.ndarray]:
    from powertrip.core.workloads import get_workload

    model = get_workload(WORKLOAD).build_model()
    rng = np.random.default_rng(0)
    return {
        k: rng.normal(0, 1e-3, v.shape).astype(np.float32)
        for k, v in model.state_dict().items()
        if v.dtype.is_floating_point
    }


def _encode_s(delta, encoding: str) -> tuple[float, list[bytes], int]:
    from powertrip.rpc.chunkwire import encode_chunks

    started = time.perf_counter()
    messages = [m for m, _ in encode_chunks(delta, upload=True, delta_encoding=encoding)]
    elapsed = time.perf_counter() - started
    data_bytes = sum(n for _, n in encode_chunks(delta, upload=True, delta_encoding=encoding))
    return elapsed, messages, data_bytes


def _receive_s(delta, messages: list[bytes], encoding: str) -> float:
    from powertrip.core.fedavg import StreamingFedAvg
    from powertrip.rpc.chunkwire import parse_upload_request
    from powertrip.rpc.tensors import TensorAssembler, layout_of

    layout = layout_of(delta, encoding)
    sites = [f"site-{i:03d}" for i in range(UPLOADS)]
    fedavg = StreamingFedAvg(sites, delta)
    started = time.perf_counter()
    for site in sites:
        assembler = TensorAssembler(expected=layout)
        for message in messages:
            assembler.add(parse_upload_request(message).chunk)
        fedavg.add(site, assembler.finish(), 1.0)
    fedavg.result()
    return time.perf_counter() - started


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """fp32 and int8, interleaved (see the module's docstring)."""
    print("deltawire: int8 against fp32 deltas (bytes, encode, receive + FedAvg) ...", flush=True)
    delta = _delta()
    fp32_gb = sum(v.nbytes for v in delta.values()) * UPLOADS / 1e9
    times: dict[str, dict[str, list[float]]] = {
        e: {"encode": [], "receive": []} for e in ("fp32", "int8")
    }
    data_bytes = {}
    for _ in range(max(1, args.repeat)):
        for encoding in ("fp32", "int8"):
            encode_s, messages, data_bytes[encoding] = _encode_s(delta, encoding)
            times[encoding]["encode"].append(encode_s)
            times[encoding]["receive"].append(_receive_s(delta, messages, encoding))
    fp32, int8 = times["fp32"], times["int8"]
    return {
        "int8_wire_bytes_ratio": data_bytes["int8"] / data_bytes["fp32"],
        "fp32_encode_ms": 1e3 * min(fp32["encode"]),
        "int8_encode_ms": 1e3 * min(int8["encode"]),
        "int8_encode_vs_fp32": median_ratio(fp32["encode"], int8["encode"]),
        "fp32_receive_fedavg_GBps": fp32_gb / min(fp32["receive"]),
        "int8_receive_fedavg_GBps": fp32_gb / min(int8["receive"]),
        "int8_receive_fedavg_vs_fp32": median_ratio(fp32["receive"], int8["receive"]),
    }

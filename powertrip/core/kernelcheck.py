"""Fingerprints of the numeric kernels a run relies on: which CPU kernel family this machine
computes, and whether each kernel's bits hold at every thread count.

Why. A run is byte-identical only where its kernels compute the same bits. When two machines
disagree, eleven golden hashes say *that* they do; this says *which kernel* does, in a second.
Each probe runs one kernel a run uses (the GEMMs of a linear layer, a convolution forward and
its weight gradient, cross-entropy, a few FEMNIST SGD steps, numpy's sums, the int8 delta
encoder) on fixed seeded inputs and keeps the SHA-256 of its output bits. A machine's
*family* is the digest of all of them at one thread; `FAMILIES_FILE` (kernel_families.json,
committed) names the families measured so far, and the golden runs keep one record per family.

The check needs torch and is imported only by the commands and tests that use it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from powertrip.core.kernels import VARIABLES, cpu_identity, kernel_mode

#: the families measured so far: name -> {cpu, vendor, setting, fingerprints}
FAMILIES_FILE = Path(__file__).with_name("kernel_families.json")
#: the thread counts a check compares: one, a 2-core machine's, a 16-core machine's
THREADS = (1, 2, 16)
#: kernels whose bits depend on the thread count by design, which no run's numbers pass
#: through (the golden runs at 2- and 16-core thread settings show it): ATen's sum of a whole
#: tensor of 32,768 elements or more splits its terms among the threads
THREAD_DEPENDENT_BY_DESIGN = frozenset({"torch.sum (whole tensor, 1e6)"})


def _digest(array) -> str:
    import torch

    if isinstance(array, torch.Tensor):
        array = array.detach().contiguous().numpy()
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def _probes() -> dict[str, Callable[[], str]]:
    """name -> a function that runs that kernel on fixed inputs and returns its digest."""
    import torch
    import torch.nn.functional as F

    from powertrip.core.deltacodec import encode

    g = torch.Generator().manual_seed(0)
    acts = torch.randn(20, 3136, generator=g)
    weight = torch.randn(2048, 3136, generator=g) * 0.01
    grad_out = torch.randn(20, 2048, generator=g)
    images = torch.randn(20, 1, 28, 28, generator=g)
    conv1 = torch.randn(32, 1, 5, 5, generator=g) * 0.1
    conv2 = torch.randn(64, 32, 5, 5, generator=g) * 0.05
    logits = torch.randn(2000, 62, generator=g)
    labels = torch.randint(0, 62, (2000,), generator=g)
    big = torch.randn(1_000_003, generator=g)
    rng = np.random.default_rng(0)
    vec = rng.standard_normal(1_000_003).astype(np.float32)

    def conv_weight_grad():
        w = conv2.clone().requires_grad_(True)
        hidden = F.max_pool2d(F.relu(F.conv2d(images, conv1, padding=2)), 2)
        F.conv2d(hidden, w, padding=2).square().sum(dim=(1, 2, 3)).mean().backward()
        return _digest(w.grad)

    def femnist_steps():
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(3136, 2048), torch.nn.ReLU(),
            torch.nn.Linear(2048, 62),
        )  # fmt: skip
        gen = torch.Generator().manual_seed(1)
        xs, ys = (
            torch.rand(3, 20, 1, 28, 28, generator=gen),
            torch.randint(0, 62, (3, 20), generator=gen),
        )
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x, y in zip(xs, ys, strict=True):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()
        return _digest(torch.cat([p.detach().flatten() for p in net.parameters()]))

    def int8_encode():
        encoded = encode(vec, "int8")
        return _digest(encoded.wire) + "/" + _digest(np.float64(encoded.scale))

    return {
        "linear forward (MKL GEMM)": lambda: _digest(acts @ weight.T),
        "linear weight gradient (MKL GEMM)": lambda: _digest(grad_out.T @ acts),
        "conv2d forward": lambda: _digest(F.conv2d(images, conv1, padding=2)),
        "conv2d weight gradient": conv_weight_grad,
        "cross_entropy sum (2000x62)": lambda: _digest(
            F.cross_entropy(logits, labels, reduction="sum")
        ),
        "log_softmax": lambda: _digest(F.log_softmax(logits, dim=1)),
        "exp and tanh (ATen vectorised)": lambda: _digest(big.exp()) + _digest(big.tanh()),
        "torch.sum (whole tensor, 1e6)": lambda: _digest(big.sum()),
        "femnist cnn 3 sgd steps": femnist_steps,
        "numpy sum and max": lambda: _digest(np.array([vec.sum(), np.abs(vec).max()])),
        "numpy weighted average": lambda: _digest(
            vec * np.float32(0.2) + vec[::-1] * np.float32(0.3) + np.roll(vec, 7) * np.float32(0.5)
        ),
        "int8 delta encode": int8_encode,
    }


def fingerprints(threads: Iterable[int] = THREADS) -> dict[int, dict[str, str]]:
    """Each probe's digest at each thread count, in this process (the kernels pinned or not as
    its environment said before torch's first op)."""
    import torch

    before = torch.get_num_threads()
    probes = _probes()
    try:
        out = {}
        for n in threads:
            torch.set_num_threads(n)
            out[n] = {name: probe() for name, probe in probes.items()}
        return out
    finally:
        torch.set_num_threads(before)


def family_digest(single_thread: dict[str, str]) -> str:
    """The family's name in records: a digest of every probe's bits at one thread."""
    text = json.dumps(single_thread, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def thread_dependent(prints: dict[int, dict[str, str]]) -> list[str]:
    """The kernels whose bits differ between thread counts (by design or not)."""
    counts = sorted(prints)
    return [n for n in prints[counts[0]] if len({prints[t][n] for t in counts}) > 1]


def load_families(path: Path = FAMILIES_FILE) -> dict[str, dict]:
    return json.loads(path.read_text()) if path.exists() else {}


def nearest_family(single_thread: dict[str, str], families: dict[str, dict]):
    """(name, kernels that differ) of the recorded family closest to these fingerprints; a
    family whose list is empty is this machine's."""
    best = None
    for name, record in families.items():
        if record.get("mode") != kernel_mode():
            continue
        differ = [k for k, v in single_thread.items() if record["fingerprints"].get(k) != v]
        if best is None or len(differ) < len(best[1]):
            best = (name, differ)
    return best


def report(prints: dict[int, dict[str, str]], families: dict[str, dict]) -> tuple[str, bool]:
    """The lines `powertrip kernels` prints, and whether the check passed: under the pinned
    kernels, every kernel a run uses holds its bits at every thread count, and a CPU of a
    vendor with a recorded family computes that family's bits (one of another vendor may
    be a family of its own: it is named, not failed)."""
    cpu = cpu_identity()
    single = prints[min(prints)]
    digest = family_digest(single)
    lines = [
        f"cpu: {cpu['model']} ({cpu['vendor']}, {cpu['cores']} cores; "
        f"{' '.join(cpu['isa']) or 'no AVX2'})",
        f"kernels: {kernel_mode()}; "
        + " ".join(f"{name}={os.environ.get(name)}" for name in VARIABLES),
    ]
    ok = True
    varying = [k for k in thread_dependent(prints) if k not in THREAD_DEPENDENT_BY_DESIGN]
    threads = "/".join(str(t) for t in sorted(prints))
    if varying and kernel_mode() == "native":
        lines.append(
            f"thread count: bits differ at {threads} threads (native kernels, as "
            f"expected): {', '.join(varying)}"
        )
    elif varying:
        ok = False
        lines.append(f"thread count: FAIL, bits differ at {threads} threads: {', '.join(varying)}")
    else:
        lines.append(
            f"thread count: ok, every kernel a run uses gives the same bits at {threads} threads"
        )
    near = nearest_family(single, families)
    if near is None:
        lines.append(f"family {digest}: no family recorded for this kernel mode")
    elif not near[1]:
        lines.append(f"family {digest}: {near[0]} ({families[near[0]]['cpu']}): recorded")
    else:
        same_vendor = families[near[0]].get("vendor") == cpu["vendor"]
        lines.append(
            f"family {digest}: not recorded; nearest {near[0]} ({families[near[0]]['cpu']}) "
            f"differs in: {', '.join(near[1])}"
        )
        if same_vendor and kernel_mode() == "pinned":
            ok = False
            lines.append("  a CPU of a recorded vendor computes other bits: report it")
    return "\n".join(lines), ok


def new_family_name(single_thread: dict[str, str]) -> str:
    """The name `--record` gives these bits: vendor, kernel mode and digest."""
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(str(cpu_identity()["vendor"]))
    return f"{vendor or 'cpu'}-{kernel_mode()}-{family_digest(single_thread)}"


def family_name(single_thread: dict[str, str], families: dict[str, dict]) -> str:
    """The recorded family these bits are, else the name recording them would give."""
    near = nearest_family(single_thread, families)
    return near[0] if near and not near[1] else new_family_name(single_thread)


def record_entry(prints: dict[int, dict[str, str]]) -> tuple[str, dict]:
    """(name, entry) to add this machine's family to kernel_families.json."""
    cpu = cpu_identity()
    single = prints[min(prints)]
    name = new_family_name(single)
    entry = {
        "cpu": cpu["model"],
        "vendor": cpu["vendor"],
        "isa": cpu["isa"],
        "mode": kernel_mode(),
        "env": {name: os.environ.get(name) for name in VARIABLES},
        "fingerprints": single,
    }
    return name, entry

"""CPU kernels pinned to one instruction set, so a seed gives the same numbers on any x86-64.

Why. torch chooses its CPU kernels by the instruction set the CPU has: ATen's vectorised
kernels (AVX2 or AVX-512), oneDNN's convolutions and MKL's matrix products each have one
code path per ISA, and each rounds differently. The same seed then trained to different
accuracies in the fourth digit on a machine with AVX-512 than on one without (golden runs:
every `rounds.csv` differed, the decisions did not). Pinning all three to AVX2, which every
x86-64 CPU of the last decade has, Intel or AMD, gives one result wherever it runs.

How. Three variables, each read once by its library at the first kernel it dispatches (not at
import), so `pin_cpu_kernels` works as long as no tensor op has run yet in the process:
ATen's `ATEN_CPU_CAPABILITY`, oneDNN's `ONEDNN_MAX_CPU_ISA` and MKL's conditional numerical
reproducibility `MKL_CBWR`. Child processes (the embedded services, site workers) inherit
them. A variable the user set is kept. Off x86-64 nothing is pinned: those CPUs have other
kernel sets, and numbers there match only one another.

The ISA is not all: oneDNN's convolutions (brgemm, at AVX2 too) size their loop blocks by
the CPU's cache sizes, so two AVX2 CPUs with other caches could add a convolution's terms in
another order. So a process that trains or evaluates also calls `configure_torch`, which in
pinned mode leaves convolutions to ATen's own kernels (im2col and MKL's GEMM, whose CNR
mode is made for exactly this); the site worker and the aggregator do at start.

The cost (bench/run.py, `pinned_kernels`): on a CPU with AVX-512 the AVX2 kernels are slower;
`POWERTRIP_CPU_KERNELS=native` trades identity for that speed (the run records which).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import MutableMapping

#: the environment variable that chooses: "pinned" (the default) or "native"
ENV = "POWERTRIP_CPU_KERNELS"
MODES = ("pinned", "native")
#: what "pinned" sets (unless already set): one kernel set for every x86-64 CPU with AVX2
PINNED: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "AVX2",
}
X86_64 = frozenset({"x86_64", "amd64"})


class KernelsError(ValueError):
    """POWERTRIP_CPU_KERNELS holds a value that is not one of MODES."""


def kernel_mode(environ: MutableMapping[str, str] | None = None) -> str:
    """The mode POWERTRIP_CPU_KERNELS asks for ("pinned" when unset); a bad value names the
    allowed ones."""
    env = os.environ if environ is None else environ
    mode = env.get(ENV, "").strip().lower() or "pinned"
    if mode not in MODES:
        raise KernelsError(f"{ENV}={env[ENV]!r}: must be one of {', '.join(MODES)}")
    return mode


def pin_cpu_kernels(environ: MutableMapping[str, str] | None = None) -> str:
    """Set the pinning variables (those not set already) when the mode is "pinned" on an
    x86-64 CPU, before any tensor op of this process; returns the mode. Idempotent."""
    env = os.environ if environ is None else environ
    mode = kernel_mode(env)
    if mode == "pinned" and platform.machine().lower() in X86_64:
        for name, value in PINNED.items():
            env.setdefault(name, value)
    return mode


def configure_torch() -> None:
    """For a process that trains or evaluates, after `pin_cpu_kernels`: in pinned mode,
    convolutions by ATen's kernels, not oneDNN's (the module's docstring says why). Imports
    torch; idempotent."""
    if kernel_mode() == "pinned":
        import torch

        torch.backends.mkldnn.enabled = False


def kernel_record() -> dict[str, str | bool | None]:
    """What a run records of its kernels: the mode, the ATen kernel set torch chose in this
    process and whether oneDNN was on (None where torch is not loaded: a process that never
    trains)."""
    torch = sys.modules.get("torch")
    capability = onednn = None
    if torch is not None:
        capability = str(torch.backends.cpu.get_cpu_capability())
        onednn = bool(torch.backends.mkldnn.enabled)
    return {"cpu_kernels": kernel_mode(), "cpu_capability": capability, "onednn": onednn}

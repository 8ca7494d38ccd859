"""The project's own kernel fingerprints (powertrip/core/kernelcheck.py): on this CPU every
kernel a run uses holds its bits at 1, 2 and 16 threads, and a CPU of a recorded vendor
computes a recorded family. A CPU that disagrees fails here, naming the kernel, before the
golden runs fail on it."""

from __future__ import annotations

import pytest

from powertrip.core import kernelcheck as K
from powertrip.core.kernels import kernel_mode


@pytest.fixture(scope="module")
def prints():
    return K.fingerprints()


def test_every_kernel_a_run_uses_holds_its_bits_at_1_2_and_16_threads(prints):
    if kernel_mode() == "native":
        pytest.skip("the native kernels split their sums by thread count, by design")
    varying = set(K.thread_dependent(prints)) - K.THREAD_DEPENDENT_BY_DESIGN
    if K.cpu_identity()["vendor"] != "GenuineIntel":
        # MKL's strict CNR branch is Intel's: elsewhere its GEMMs promise nothing; say which
        mkl = {k for k in varying if "GEMM" in k or "conv" in k or "sgd" in k}
        if mkl:
            pytest.skip(f"MKL runs no CNR branch on this CPU; thread-dependent: {sorted(mkl)}")
    assert not varying, f"bits differ between 1, 2 and 16 threads: {sorted(varying)}"


def test_this_cpu_computes_its_vendors_recorded_family(prints):
    """Equal bits, kernel by kernel, to the family recorded for this vendor and mode; a CPU of
    a vendor with no record (so far: any but Intel, pinned) skips with its fingerprints' name."""
    cpu, single = K.cpu_identity(), prints[1]
    families = {
        name: f
        for name, f in K.load_families().items()
        if f["vendor"] == cpu["vendor"] and f["mode"] == kernel_mode()
    }
    if not families:
        pytest.skip(
            f"no {kernel_mode()} family recorded for {cpu['vendor']} ({cpu['model']}): "
            f"`powertrip kernels --record` adds {K.family_digest(single)}"
        )
    name, differ = K.nearest_family(single, families)
    assert not differ, f"{cpu['model']} differs from {name} in: {', '.join(differ)}"


def test_the_check_names_the_kernel_that_differs():
    """On made-up fingerprints: one kernel changed against the record, one thread-dependent."""
    single = {"linear forward (MKL GEMM)": "a", "conv2d forward": "b", "log_softmax": "c"}
    cpu = K.cpu_identity()
    record = {"cpu": "x", "vendor": cpu["vendor"], "mode": kernel_mode(), "fingerprints": single}
    text, ok = K.report({1: single, 2: single, 16: single}, {"fam": record})
    assert ok and "fam (x): recorded" in text
    moved = {**single, "conv2d forward": "B"}
    text, ok = K.report({1: moved, 2: moved, 16: moved}, {"fam": record})
    assert "differs in: conv2d forward" in text
    assert ok is (kernel_mode() == "native")  # pinned: a recorded vendor's other bits fail
    wobbly = {**single, "log_softmax": "C"}
    text, ok = K.report({1: single, 2: single, 16: wobbly}, {"fam": record})
    assert "log_softmax" in text.splitlines()[2]
    assert ok is (kernel_mode() == "native")


def test_a_family_is_named_by_its_bits_not_its_order():
    a = {"x": "1", "y": "2"}
    assert K.family_digest(a) == K.family_digest(dict(reversed(a.items())))
    assert K.family_digest(a) != K.family_digest({"x": "1", "y": "3"})

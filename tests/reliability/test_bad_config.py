"""Bad configuration through the real CLI and a real service: exit code 2 and a message that
names the file or field (and the allowed values), never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.reliability.procs import REPO


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


CASES = [
    # (yaml text, words the message must contain)
    ("workload: synthetic\nnum_sites: [oops\n", ["invalid YAML"]),
    ("workload: synthetic\nreference_bandwidth_gbps: -5\n", ["reference_bandwidth_gbps", "> 0"]),
    ("workload: synthetic\nbandwidth: 5\n", ["unknown key", "bandwidth", "allowed keys"]),
    ("workload: synthetic\nnum_sites: -3\n", ["num_sites", ">= 1"]),
    ("workload: synthetic\nclock: sundial\n", ["clock", "simulated", "wall"]),
    ("workload: synthetic\nround_deadline_s: 0\n", ["round_deadline_s"]),
    ("workload: synthetic\nseed: abc\n", ["seed", "int"]),
    ("- just\n- a list\n", ["expected a mapping"]),
]


@pytest.mark.parametrize(("text", "words"), CASES)
def test_cli_and_aggregator_name_the_bad_field(tmp_path, capsys, text, words):
    """In-process entry points (the same main() the console scripts run): fast."""
    from powertrip.app.cli import main as cli
    from services.aggregator.__main__ import main as aggregator

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    for main, argv in (
        (cli, ["run", "--config", str(path), "--out", str(tmp_path / "o")]),
        (aggregator, ["--config", str(path), "--port", "0"]),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        for word in words:
            assert word in err, (argv, word, err)


def test_real_processes_exit_2_without_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(CASES[1][0])
    for argv in (
        ["-m", "powertrip.app.cli", "run", "--config", str(path)],
        ["-m", "powertrip.app.cli", "run", "--workload", "synthetic", "--sites", "0"],
    ):
        done = _run(*argv)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert "reference_bandwidth_gbps" in done.stderr or "num_sites" in done.stderr


@pytest.mark.parametrize(
    ("tokens", "words"),
    [
        ({"site-000": "short"}, ["site-000", ">= 16 characters"]),
        ({"site-000": "x" * 20, "site-001": "x" * 20}, ["share a token"]),
    ],
)
def test_bad_site_tokens_file_is_named(tmp_path, capsys, tokens, words):
    from services.aggregator.__main__ import main as aggregator

    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(tokens))
    assert aggregator(["--site-tokens", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err

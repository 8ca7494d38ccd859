"""--log-format json (env POWERTRIP_LOG_FORMAT): one JSON object per line with ts, level,
service, logger, message, and exc_info when there is one; text stays the default."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from powertrip.rpc.service import ServiceSpec, base_parser
from services.policy.config import PolicyConfig, PolicyConfigError, build_parser

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"ts", "level", "service", "logger", "message"}

SNIPPET = """
import logging
from powertrip.rpc.service import setup_process
setup_process("INFO", "profiler", {fmt!r})
log = logging.getLogger("profiler")
log.debug("not shown")
log.info("serving on port %d", 50052)
log.warning('a "quoted" message\\nover two lines')
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("profiler.book").exception("broke")
"""


def _run(fmt: str | None, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", SNIPPET.format(fmt=fmt)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_json_format_emits_one_parseable_object_per_line():
    lines = _run("json")
    records = [json.loads(line) for line in lines]  # every line parses on its own
    assert [r["message"] for r in records] == [
        "serving on port 50052",
        'a "quoted" message\nover two lines',
        "broke",
    ]
    for record in records:
        assert FIELDS <= set(record), record
        assert record["service"] == "profiler"
        assert record["ts"].endswith("Z") and "T" in record["ts"]
    assert [r["level"] for r in records] == ["INFO", "WARNING", "ERROR"]
    assert records[2]["logger"] == "profiler.book"
    assert "ZeroDivisionError" in records[2]["exc_info"]
    assert "exc_info" not in records[0]


def test_text_is_the_default_and_the_environment_picks_json():
    text = _run(None, {"POWERTRIP_LOG_FORMAT": ""})
    assert " profiler INFO serving on port 50052" in text[0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(text[0])
    from_env = _run(None, {"POWERTRIP_LOG_FORMAT": "json"})
    assert json.loads(from_env[0])["message"] == "serving on port 50052"


def test_a_bad_format_in_the_environment_exits_2_naming_it():
    done = subprocess.run(
        [sys.executable, "-m", "services.profiler", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "POWERTRIP_LOG_FORMAT": "xml"},
    )
    assert done.returncode == 2, done.stderr
    assert "profiler: log format 'xml' (POWERTRIP_LOG_FORMAT) is not one of text, json" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_every_service_parser_takes_log_format(monkeypatch, capsys):
    spec = ServiceSpec("profiler", 50052, "test")
    monkeypatch.delenv("POWERTRIP_LOG_FORMAT", raising=False)
    assert base_parser(spec).parse_args([]).log_format == "text"
    assert base_parser(spec).parse_args(["--log-format", "json"]).log_format == "json"
    monkeypatch.setenv("POWERTRIP_LOG_FORMAT", "json")
    assert base_parser(spec).parse_args([]).log_format == "json"
    assert base_parser(spec).parse_args(["--log-format", "text"]).log_format == "text"
    with pytest.raises(SystemExit) as exc:
        base_parser(spec).parse_args(["--log-format", "xml"])
    assert exc.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err
    # the policy service: defaults < environment < flags, and a bad value is named
    args = build_parser().parse_args([])
    assert PolicyConfig.resolve(args, env={}).log_format == "text"
    assert PolicyConfig.resolve(args, env={"POWERTRIP_LOG_FORMAT": "JSON"}).log_format == "json"
    flagged = build_parser().parse_args(["--log-format", "text"])
    assert PolicyConfig.resolve(flagged, env={"POWERTRIP_LOG_FORMAT": "json"}).log_format == "text"
    with pytest.raises(PolicyConfigError, match="log_format 'xml'"):
        PolicyConfig.resolve(args, env={"POWERTRIP_LOG_FORMAT": "xml"})


def test_a_real_service_logs_json_lines_from_start_to_drain(tmp_path):
    """python -m services.policy --log-format json: every stderr line is a JSON object."""
    errors = tmp_path / "stderr"
    with errors.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.policy", "--port", "0", "--log-format", "json"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=REPO,
        )
        try:
            assert "listening on port" in proc.stdout.readline()
            # at once: the SIGTERM handler is installed before that line (serve), so a
            # signal right after it drains the service instead of killing it
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    records = [json.loads(line) for line in errors.read_text().splitlines()]
    messages = [r["message"] for r in records]
    assert any(m.startswith("serving ") for m in messages), messages
    assert "exited cleanly" in messages
    assert all(FIELDS <= set(r) and r["service"] == "policy" for r in records)


CONTEXT_SNIPPET = """
import logging
from powertrip.rpc.service import add_log_context, setup_process
setup_process("INFO", "aggregator", "json")
add_log_context(run_id="compose")
log = logging.getLogger("aggregator")
log.info("serving")
log.info("round %d: k=%d", 7, 3, extra={"round": 7})
log.info("uploading", extra={"round": 7, "site": "site-003", "task": "r7-site-003"})
"""


def test_json_lines_carry_the_run_and_the_round_site_and_task_they_are_about():
    done = subprocess.run(
        [sys.executable, "-c", CONTEXT_SNIPPET], capture_output=True, text=True, timeout=60,
        cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert [r.get("run_id") for r in records] == ["compose"] * 3
    assert "round" not in records[0] and records[1]["round"] == 7
    assert (records[2]["site"], records[2]["task"]) == ("site-003", "r7-site-003")


def test_an_unknown_log_context_field_is_refused():
    from powertrip.rpc.service import add_log_context

    with pytest.raises(ValueError, match="unknown log context"):
        add_log_context(region="eu")

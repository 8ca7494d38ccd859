"""The CLI's operator verbs beyond `ls` and `status`: `config show|validate` (the resolved
configuration and each setting's source), `policies --format json`, `logs [-f]` and
`audit` (powertrip/app/cli.py, cliconfig.py, powertrip/app/operate.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from powertrip.app import operate
from powertrip.app.cli import main
from powertrip.core import runfiles
from powertrip.core.policies import REGISTRY


def test_config_show_names_each_settings_source(tmp_path, capsys, monkeypatch):
    path = tmp_path / "run.yaml"
    path.write_text("num_sites: 20\nseed: 4\n")
    monkeypatch.setenv("POWERTRIP_RUN_SEED", "9")
    code = main(["config", "show", "--config", str(path), "--workload", "femnist",
                 "--set", "lr=0.05", "--env", "--format", "json"])  # fmt: skip
    assert code == 0
    shown = json.loads(capsys.readouterr().out)
    config, sources = shown["config"], shown["sources"]
    assert (config["num_sites"], sources["num_sites"]) == (20, str(path))
    assert (config["seed"], sources["seed"]) == (9, "POWERTRIP_RUN_SEED")
    assert (config["lr"], sources["lr"]) == (0.05, "--set lr=0.05")
    assert sources["workload"] == "--workload" and sources["policy"] == "default"
    assert sources["target_accuracy"] == "workload default"  # femnist's 0.45
    main(["config", "show", "--sites", "7"])
    assert "num_sites: 7  # --sites" in capsys.readouterr().out.splitlines()


def test_config_validate_exits_2_naming_the_setting_and_its_source(capsys):
    assert main(["config", "validate", "--set", "lr=-1"]) == 2
    assert "--set lr=-1: lr: must be > 0" in capsys.readouterr().err
    assert main(["config", "validate", "--policy", "adaptive"]) == 0
    assert capsys.readouterr().out.startswith("valid: adaptive on femnist")


def test_policies_as_json_list_every_policy_with_its_defaults(capsys):
    assert main(["policies", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in listed] == list(REGISTRY)
    static = next(p for p in listed if p["name"] == "static")
    assert static["params"] == {"k": 0.0, "m_ref_gb": 1.5} and static["summary"]
    assert static["params"] == REGISTRY["static"].Params().as_numbers()
    k = static["parameters"][0]
    assert k["name"] == "k" and k["type"] == "int" and k["default"] is None
    assert k["allowed"].startswith("a whole number >= 1") and k["doc"]
    adaptive = next(p for p in listed if p["name"] == "adaptive")
    assert adaptive["estimator"] == "clock" and static["estimator"] is None


def _run_with_logs(tmp_path):
    run = tmp_path / "run"
    (run / runfiles.LOGS_DIR).mkdir(parents=True)
    for name in ("aggregator", "site_worker:0", "site_worker:1"):
        (run / runfiles.LOGS_DIR / f"{name}.log").write_text(f"{name} one\n{name} two\n")
    return run


def test_logs_prints_each_log_prefixed_and_filters_by_service(tmp_path, capsys):
    run = _run_with_logs(tmp_path)
    assert operate.follow_logs(run, tail=1) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[aggregator] aggregator two",
        "[site_worker:0] site_worker:0 two",
        "[site_worker:1] site_worker:1 two",
    ]
    assert operate.follow_logs(run, "site_worker", tail=5) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    assert operate.follow_logs(run, "profiler") == 2
    assert "no log of 'profiler'; there are: aggregator, site_worker:0" in capsys.readouterr().err


def test_logs_follow_prints_new_lines_and_ends_with_the_run(tmp_path, capsys):
    run = _run_with_logs(tmp_path)
    log = run / runfiles.LOGS_DIR / "aggregator.log"

    def the_run_goes_on():
        time.sleep(0.3)
        with log.open("a") as f:
            f.write("round 1 done\nhalf a li")
        time.sleep(0.3)
        with log.open("a") as f:
            f.write("ne\n")
        (run / runfiles.SUMMARY).write_text("{}")

    writer = threading.Thread(target=the_run_goes_on)
    writer.start()
    assert operate.follow_logs(run, "aggregator", tail=0, follow=True, poll_s=0.05) == 0
    writer.join()
    assert capsys.readouterr().out.splitlines() == [
        "[aggregator] round 1 done",
        "[aggregator] half a line",
    ]


def test_audit_hands_its_arguments_to_the_aggregators_audit(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "powertrip", "audit", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "services.aggregator.audit" in done.stderr and "run_dir" in done.stderr


def test_completion_scripts_know_every_command_and_are_valid_shell(capsys, tmp_path):
    """`powertrip completion bash|zsh`: generated from the parser itself (shtab), so a new
    command or flag completes without anyone editing a script."""
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    for word in ("reproduce", "provision", "revoke", "--site-tokens", "--format"):
        assert word in script, word
    path = tmp_path / "powertrip.bash"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert main(["completion", "zsh"]) == 0
    assert "#compdef powertrip" in capsys.readouterr().out

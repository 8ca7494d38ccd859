"""The CLI's options: --version, --set, checks made before anything starts, compare's reuse
of finished runs, and help text."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from powertrip.app.cli import main
from powertrip.app.cliconfig import explicit_settings, load_config
from powertrip.app.cliparser import build_parser
from powertrip.app.experiments.commands import time_bound
from powertrip.app.experiments.reuse import previous_run
from powertrip.core.config import ConfigError, RunConfig

REPO = Path(__file__).resolve().parents[2]


def _config(*argv: str) -> RunConfig:
    return load_config(build_parser().parse_args(list(argv)))


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == (
        f"powertrip {importlib.metadata.version('powertrip')}"
    )


def test_set_reads_values_as_the_yaml_file_does(tmp_path):
    config = _config(
        "run",
        "--set", "lr=0.01",
        "--set", "shadow=false",
        "--set", "work_model=data-parallel",
        "--set", "policy_params.probe_cost=0.2",
        "--set", "policy_params.k=20",
        "--set", "data_dir=2024",
        "--set", "target_accuracy=null",
        "--set", "comm_directions=2",
        "--set", "delta_encoding=fp32",
    )  # fmt: skip
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(
        "lr: 0.01\nshadow: false\nwork_model: data-parallel\n"
        "policy_params: {probe_cost: 0.2, k: 20}\ndata_dir: '2024'\ncomm_directions: 2\n"
        "delta_encoding: fp32\n"
    )
    assert config == RunConfig.from_yaml(yaml_file).validate()
    assert config.policy_params == {"probe_cost": 0.2, "k": 20.0}


def test_precedence_yaml_then_flags_then_set(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("workload: synthetic\nnum_sites: 6\nlr: 0.2\nseed: 3\n")
    c = str(yaml_file)
    assert _config("run", "--config", c).num_sites == 6
    assert _config("run", "--config", c, "--sites", "7").num_sites == 7
    config = _config("run", "--config", c, "--sites", "7", "--set", "num_sites=8")
    assert (config.num_sites, config.lr, config.seed) == (8, 0.2, 3)
    # the last --set of a setting wins; --set policy_params.NAME adds to --param
    config = _config("run", "--set", "seed=1", "--set", "seed=2", "--param", "k=3",
                     "--set", "policy_params.radius_miles=500")  # fmt: skip
    assert config.seed == 2
    assert config.policy_params == {"k": 3.0, "radius_miles": 500.0}


def test_set_counts_as_chosen_for_compare_bounds():
    args = build_parser().parse_args(
        [
            "compare",
            "--workload",
            "synthetic",
            "--set",
            "max_rounds=7",
            "--set",
            "policy_params.k=2",
        ]
    )
    explicit = explicit_settings(args)
    assert {"max_rounds", "workload", "policy_params"} <= explicit
    config, line = time_bound(load_config(args), explicit)
    assert config.max_rounds == 7 and "or 7 rounds (max_rounds as set)" in line


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--set", "work_model=foo"], ["--set work_model=foo: work_model must be one of",
                                       "local-steps, data-parallel"]),
        (["--set", "clock=sundial"], ["clock must be one of simulated, wall"]),
        (["--set", "bogus=1"], ["unknown key bogus", "allowed keys: policy, policy_params"]),
        (["--set", "seed=1.5"], ["seed must be of type int"]),
        (["--set", "lr=fast"], ["lr must be of type float"]),
        (["--set", "lr"], ["expected KEY=VALUE"]),
        (["--set", "policy_params.probe_cost=best"], ["probe_cost", "'best' is not a number"]),
        (["--set", "num_sites=0"], ["num_sites", ">= 1"]),
        (["--set", "clock="], ["clock must not be empty"]),
        (["--policy", "nope"], ["unknown policy nope", "valid policies: powertrip"]),
        (["--policy", "static", "--param", "kk=3"], ["unknown parameter(s) kk", "allowed: k"]),
        (["--policy", "static", "--param", "k=-1"],
         ["policy 'static': k must be a whole number >= 1"]),
        (["--policy", "adaptive", "--set", "policy_params.probe_cost=2"],
         ["policy 'adaptive': probe_cost must be in [0, 1], got 2"]),
        # synthetic has no limit (a site beyond its 200 users generates its own data): the
        # site-count check is shown on speech's 249 training samples
        (["--workload", "speech", "--sites", "250"], ["num_sites", "250", "249 training samples"]),
        (["--workload", "speech", "--set", "num_sites=250"], ["num_sites", "249 training samples"]),
    ],
)  # fmt: skip
def test_bad_values_exit_2_before_anything_is_created(tmp_path, capsys, argv, words):
    out = tmp_path / "run"
    assert main(["run", "--workload", "synthetic", "--out", str(out), "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, (word, err)
    assert not out.exists()
    assert not list(tmp_path.iterdir())


def test_sites_beyond_femnist_training_samples(tmp_path, capsys):
    from powertrip.app.experiments.datacmd import training_samples
    from powertrip.core.workloads import get_workload

    available = training_samples(get_workload("femnist"))
    assert available and available > 10_000
    out = tmp_path / "run"
    argv = ["run", "--workload", "femnist", "--sites", str(available + 1), "--out", str(out)]
    assert main(argv) == 2
    assert f"{available} training samples of workload femnist" in capsys.readouterr().err
    assert not out.exists()


def test_training_samples_match_the_loaded_data():
    from powertrip.app.experiments.datacmd import training_samples
    from powertrip.core.workloads import get_workload

    assert training_samples(get_workload("speech")) == 249
    # synthetic generates a site's data beyond its 200 users: no limit to check against
    assert training_samples(get_workload("synthetic")) is None


@pytest.mark.parametrize(
    ("command", "argv", "words"),
    [
        ("compare", ["--policies", "static,nope"], ["unknown policy nope"]),
        ("compare", ["--policies", " , "], ["--policies: no policy named"]),
        ("compare", ["--policies", "static:k"], ["a parameter is written NAME=VALUE"]),
        ("compare", ["--policies", "static:nope=1"], ["unknown parameter(s) nope"]),
        ("compare", ["--policies", "powertrip:window=x"], ["window: 'x' is not a number"]),
        ("compare", ["--policies", "static:k=2.5"], ["policy 'static': k must be a whole number"]),
        ("compare", ["--budget-factor", "-1"], ["--budget-factor: must be >= 0"]),
        ("sweep", ["--k", "3,0"], ["--k values must be in 1..6"]),
        ("sweep", ["--k", "a"], ["--k must be comma-separated integers"]),
    ],
)
def test_compare_and_sweep_check_first(tmp_path, capsys, command, argv, words):
    out = tmp_path / "out"
    args = [command, "--workload", "synthetic", "--sites", "6", "--out", str(out), *argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not out.exists()


def test_compare_never_replaces_a_directory_that_is_not_a_run(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "static").mkdir(parents=True)
    (out / "static" / "notes.txt").write_text("mine")
    argv = ["compare", "--workload", "synthetic", "--policies", "static", "--out", str(out)]
    assert main(argv) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert (out / "static" / "notes.txt").read_text() == "mine"


def test_previous_run_judges_reuse(tmp_path):
    config = RunConfig(workload="synthetic", num_sites=8, policy="static")
    run_dir = tmp_path / "static"
    assert previous_run(run_dir, config) == ("none", None)
    run_dir.mkdir()
    config.write_yaml(run_dir / "run-config.yaml")
    assert previous_run(run_dir, config) == ("other", "an unfinished run without a checkpoint")
    (run_dir / "checkpoint").mkdir()
    assert previous_run(run_dir, config) == ("unfinished", None)
    summary = {"status": "done", "stopped_reason": "max_rounds", "rounds": 3}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert previous_run(run_dir, config) == ("done", summary)
    # threads and processes do not change results; the seed does
    assert previous_run(run_dir, RunConfig(**{**config.to_dict(), "train_threads": 4}))[0] == (
        "done"
    )
    state, why = previous_run(run_dir, RunConfig(**{**config.to_dict(), "seed": 1}))
    assert state == "other" and "(seed)" in why
    (run_dir / "summary.json").write_text(json.dumps({"status": "failed", "message": "boom"}))
    assert previous_run(run_dir, config) == ("other", "a failed run (boom)")


def test_reproduce_set_is_written_into_its_base_config(tmp_path, capsys):
    from reproduction.cli import reproduce_config

    args = build_parser().parse_args(
        ["reproduce", "--set", "lr=0.05", "--set", "policy_params.window=3"]
    )
    path = reproduce_config(args, tmp_path / "c.yaml")
    data = yaml.safe_load(path.read_text())
    assert data["lr"] == 0.05 and data["policy_params"]["window"] == 3.0
    assert data["workload"] == "femnist"  # the rest of configs/reproduce.yaml is kept
    # a setting that one of reproduce's own flags replaces afterwards is refused
    argv = ["reproduce", "--workload", "synthetic", "--set", "lr=0.05", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "--set lr=0.05: reproduce's --workload sets lr" in capsys.readouterr().err


HELP_COMMANDS = [
    ["-m", "powertrip.app.cli", *c]
    for c in (["--help"], ["run", "--help"], ["compare", "--help"], ["sweep", "--help"])
] + [["-m", f"services.{s}", "--help"] for s in ("aggregator", "policy", "profiler", "site_worker")]


@pytest.mark.parametrize("argv", HELP_COMMANDS, ids=lambda a: " ".join(a[1:]))
def test_help_says_nothing_empty_about_defaults(argv):
    done = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    for empty in ("(default: None)", "(default: False)", "(default: )", "(default None)"):
        assert empty not in done.stdout, (empty, done.stdout)


@pytest.mark.slow
def test_compare_reuses_finished_runs_and_resumes_an_interrupted_one(tmp_path):
    out = tmp_path / "cmp"
    argv = [
        sys.executable, "-m", "powertrip.app.cli", "compare", "--workload", "synthetic",
        "--policies", "static,all", "--sites", "8", "--max-rounds", "3", "--seed", "1",
        "--out", str(out), "--quiet",
    ]  # fmt: skip

    def compare() -> str:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    compare()
    rounds = {p: (out / p / "rounds.csv") for p in ("static", "all")}
    before = {p: (f.stat().st_mtime_ns, f.read_bytes()) for p, f in rounds.items()}
    again = compare()
    for policy in ("static", "all"):
        assert f"policy {policy}: already finished in {out / policy}, reused" in again
        assert rounds[policy].stat().st_mtime_ns == before[policy][0]
    assert (out / "comparison.csv").exists()
    # 'all' interrupted before its summary: resumed from its checkpoint to the same rows
    (out / "all" / "summary.json").unlink()
    resumed = compare()
    assert f"policy static: already finished in {out / 'static'}, reused" in resumed
    assert f"policy all: resuming the unfinished run in {out / 'all'}" in resumed
    assert rounds["static"].stat().st_mtime_ns == before["static"][0]
    assert rounds["all"].read_bytes() == before["all"][1]
    assert json.loads((out / "all" / "summary.json").read_text())["status"] == "done"


@pytest.mark.slow
def test_compare_runs_one_policy_twice_with_its_own_parameters(tmp_path):
    out = tmp_path / "cmp"
    argv = [
        sys.executable, "-m", "powertrip.app.cli", "compare", "--workload", "synthetic",
        "--policies", "static:k=2,static:k=5", "--sites", "8", "--max-rounds", "2",
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    for k in (2, 5):
        rounds = (out / f"static-k{k}" / "rounds.csv").read_text().splitlines()
        assert rounds[1].split(",")[3] == str(k)  # the k column: each run its own k
        assert f"static:k={k}: time to" in done.stdout  # each run's line, and the table's


def test_load_config_rejects_a_bad_set_before_validation():
    with pytest.raises(ConfigError, match="--set trainer=gpu: trainer must be one of loop, vmap"):
        _config("run", "--set", "trainer=gpu")


def test_resume_goes_on_with_what_a_later_setting_meant_when_the_run_started(tmp_path):
    """A run stored before fused_sgd existed trained with plain SGD: --resume keeps that,
    not today's default; a run stored with the setting keeps its own value."""
    from powertrip.app.cliconfig import resume_args

    def resumed(stored: dict) -> RunConfig:
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        run.mkdir()
        (run / "run-config.yaml").write_text(yaml.safe_dump(stored))
        args = build_parser().parse_args(["run", "--resume", str(run)])
        resume_args(args)
        return load_config(args)

    old = RunConfig(workload="synthetic", num_sites=4).to_dict()
    del old["fused_sgd"]
    assert RunConfig().fused_sgd is True  # today's default, which an old run must not take
    assert resumed(old).fused_sgd is False
    assert resumed({**old, "fused_sgd": True}).fused_sgd is True
    assert resumed(old).num_sites == 4  # the rest of the stored configuration as before


def test_report_interrupted_says_so_and_exits_130(tmp_path, capsys, monkeypatch):
    """Ctrl-C while `powertrip report` draws: one line saying what to run again, no
    traceback, exit 128 + SIGINT."""
    import powertrip.app.report

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(powertrip.app.report, "render", interrupted)
    assert main(["report", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err.strip() == (
        f"powertrip report: interrupted by SIGINT; the runs are untouched; "
        f"powertrip report {tmp_path} draws the figures again"
    )


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["sweep", "--k", "2", "--ray-gpus", "1"], "it needs --ray ADDRESS"),
        (["run", "--ray", "auto", "--ray-gpus", "-1"], "must be >= 0"),
    ],
)
def test_ray_gpus_needs_ray_and_a_count(argv, why, capsys):
    assert main(argv) == 2
    assert why in capsys.readouterr().err


def test_the_ranking_is_rank_by_and_the_former_objective_flag_says_so(capsys):
    """`compare --rank-by` ranks a comparison; the run setting `objective` is another thing,
    so the flag that shared its name is now an alias that says it was renamed."""
    from powertrip.app.cliflags import settle_rank_by
    from powertrip.app.cliparser import build_parser

    args = build_parser().parse_args(["report", "runs/x", "--rank-by", "energy"])
    settle_rank_by(args)
    assert args.rank_by == "energy" and capsys.readouterr().err == ""
    args = build_parser().parse_args(["report", "runs/x", "--objective", "carbon"])
    settle_rank_by(args)
    assert args.rank_by == "carbon"
    assert "--objective (the ranking) is now --rank-by" in capsys.readouterr().err
    help_text = build_parser()._subparsers._group_actions[0].choices["compare"].format_help()
    assert "--rank-by" in help_text and "--objective" not in help_text

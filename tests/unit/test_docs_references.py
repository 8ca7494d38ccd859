"""The docs name only what exists: every `powertrip` command and flag, `make` target, repository
path, policy and policy parameter a page names is checked against the code, so a page that
still describes something deleted or renamed fails here."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from powertrip.app.cliparser import build_parser
from powertrip.core.policies import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    {
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        ROOT / "deploy" / "README.md",
        ROOT / "examples" / "flower" / "README.md",
        ROOT / "results" / "README.md",
        ROOT / "tests" / "README.md",
    }
    & {p for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
)
#: top-level entries of the repository a path in a page may start with
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} | {".ci"}
#: options deleted in 1.0 (their runs are in commit e2b9ee1): no page may name them
DELETED = (
    "block_se", "shrink_in_fit", "level_se", "down_probe", "min_probe", "rule=feedback",
    "gain=separable", "calibrate=1", "powertrip_feedback", "policyparams", "test-fast",
    "RELIABILITY.md", "plateau_policies", "fig11_plateau",
)  # fmt: skip
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """A parser's option strings and those of every subcommand below it (`data info`)."""
    found = set()
    for action in parser._actions:
        found |= set(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= _options(child)
    return found


def cli_options() -> dict[str, set[str]]:
    """Subcommand -> its option strings (with the parser's own)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    top = {o for a in parser._actions for o in a.option_strings}
    return {name: top | _options(p) for name, p in sub.choices.items()}


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, flags=re.M))


def all_params() -> set[str]:
    return {k for cls in REGISTRY.values() for k in cls.Params.names()}


def problems(text: str, where: str = "page") -> list[str]:
    """What `text` names that does not exist (see the module's docstring)."""
    found: list[str] = []
    options, targets, params = cli_options(), make_targets(), all_params()
    for line in text.splitlines():
        # a command: at the start of a code line, or in backticks
        command = r"(?:^\s*|`)(?:\.venv/bin/)?powertrip ([a-z][\w-]*)((?: [^`|#]*)?)"
        for cmd in re.finditer(command, line):
            sub, rest = cmd.group(1), cmd.group(2)
            if sub not in options:
                found.append(f"{where}: `powertrip {sub}`: no such command")
                continue
            if sub == "serve":
                continue  # its flags are the service's own
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest):
                if flag not in options[sub]:
                    found.append(f"{where}: `powertrip {sub} {flag}`: no such flag")
        for target in re.findall(r"(?:^\s*|`)make ([a-z][\w-]*)", line):
            if target not in targets:
                found.append(f"{where}: `make {target}`: no such target")
        for name in re.findall(r"(?:--param |policy_params\.)([a-z_]+)=", line):
            if name not in params:
                found.append(f"{where}: policy parameter {name}: no policy has it")
        for policy, name in re.findall(r"\b([a-z][\w-]*):([a-z_]+)=", line):
            if policy in REGISTRY and name not in REGISTRY[policy].Params.names():
                found.append(f"{where}: {policy}:{name}=: {policy} has no parameter {name}")
        for names in re.findall(r"--polic(?:y|ies)[ =]([\w:=.,-]+)", line):
            for spec in names.split(","):
                policy = spec.split(":")[0]
                if policy and not PLACEHOLDER.search(policy) and policy not in REGISTRY:
                    found.append(f"{where}: policy {policy}: no such policy")
        for deleted in DELETED:
            if deleted in line:
                found.append(f"{where}: names {deleted}, deleted in 1.0 (commit e2b9ee1)")
    return found


def missing_paths(text: str, page: Path) -> list[str]:
    """Repository paths in backticks or relative links that do not exist."""
    found = []
    candidates = re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)\s#]+)", text)
    for raw in candidates:
        path = re.sub(r"(::|:)\w+$", "", raw.split("#")[0].rstrip(".,:;)"))
        if not path or "://" in path or PLACEHOLDER.search(path) or path.startswith("runs/"):
            continue
        relative = path.startswith(("../", "./"))
        if not relative and (path.split("/")[0] not in TOP or "/" not in path):
            continue
        # relative to the page, the repository, or a folder below the page's (a README's
        # table names `tests/x.yml` of the folder its row is about)
        candidates_ = [page.parent / path, ROOT / path, *page.parent.glob(f"*/{path}")]
        if any(c.resolve().exists() for c in candidates_) or _made_at_run_time(page, path):
            continue
        found.append(f"{page.relative_to(ROOT)}: {raw}: no such file or folder")
    return found


def _made_at_run_time(page: Path, path: str) -> bool:
    """A path the project writes, which .gitignore keeps out (deploy/secrets, runs/, bench
    results): named by a page, absent from a checkout."""
    below = [d for d in page.parent.iterdir() if d.is_dir() and not _ignored(d)]
    for base in (page.parent, ROOT, *below):
        target = (base / path).resolve()
        if ROOT not in target.parents:
            continue
        if _ignored(target):
            return True
    return False


def _ignored(path: Path) -> bool:
    """Whether git ignores `path` (a folder's pattern ends in "/", so both are asked)."""
    inside = str(path.resolve().relative_to(ROOT))
    for name in (inside, inside + "/"):
        done = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "-q", name], capture_output=True
        )
        if done.returncode == 0:
            return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_page_names_only_what_exists(page):
    text = page.read_text()
    where = str(page.relative_to(ROOT))
    assert problems(text, where) + missing_paths(text, page) == []


def test_the_checker_finds_each_kind_of_stale_reference():
    text = "\n".join(
        [
            "`powertrip run --sites 10 --warp-speed`",
            "`powertrip teleport`",
            "`make flyaway`",
            "`.venv/bin/powertrip compare --policies adaptive,fastest`",
            "`--param gain=separable`",
            "`compare --policies adaptive:block_se=1`",
            "see `docs/nowhere.md` and [this](powertrip/core/nothing.py)",
            "`powertrip run --policy adaptive --param probe_cost=0.2`",  # fine
        ]
    )
    found = problems(text) + missing_paths(text, ROOT / "README.md")
    joined = "\n".join(found)
    for expected in (
        "--warp-speed`: no such flag",
        "powertrip teleport`: no such command",
        "make flyaway`: no such target",
        "policy fastest: no such policy",
        "policy parameter gain: no policy has it",
        "adaptive has no parameter block_se",
        "names block_se, deleted",
        "docs/nowhere.md: no such file",
        "powertrip/core/nothing.py: no such file",
    ):
        assert expected in joined, (expected, found)
    assert not [f for f in found if "probe_cost" in f]

#!/usr/bin/env bash
# Stage the finished runs of the evaluation for a commit: every run directory under
# results/reproduce/runs whose summary.json says "done" (a run still in progress, or one a
# killed reproduce left behind, is not staged; the next reproduce redoes it), and the
# base-config.yaml of each set-up/seed group that has one. .gitignore keeps models and logs
# out. Usage, from anywhere in the checkout: bash results/add-finished.sh && git commit
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
staged=0
for summary in results/reproduce/runs/*/seed*/*/summary.json; do
  [[ -e "$summary" ]] || continue
  run=$(dirname "$summary")
  if python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])).get("status") != "done")' "$summary" 2>/dev/null \
    && [[ -n "$(git status --porcelain --untracked-files=all -- "$run" | grep -v '^A ')" ]]; then
    git add -- "$run"
    staged=$((staged + 1))
    git add -- "$(dirname "$run")/base-config.yaml" 2>/dev/null || true
    git add -- "$(dirname "$run")/sites.json" 2>/dev/null || true
  fi
done
[[ -f results/reproduce/reproduce.json ]] && git add results/reproduce/reproduce.json
echo "staged $staged finished run(s); git diff --cached --stat shows them"

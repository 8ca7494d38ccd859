#!/usr/bin/env bash
# The plateau runs of results/fig11-plateau/, all at once on one GPU, each stopped (SIGINT:
# the finished rounds stay in its CSV) after LIMIT seconds. The CSVs and logs come back as
# one archive, $OUT/plateau.tgz. Run from the repository root:
#   OUT=/tmp/plateau LIMIT=450 bash results/fig11-plateau/run-gpu.sh
# RUNS lists k:seed pairs; DEVICE=cpu ROUNDS=2 tries the script on a machine with no GPU.
set -u
OUT=${OUT:?set OUT to a folder for the results}
LIMIT=${LIMIT:-450}
ROUNDS=${ROUNDS:-300}
DEVICE=${DEVICE:-cuda}
RUNS=${RUNS:-"10:2 50:0 50:1 50:2 100:0 100:1 100:2"}
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
mkdir -p "$OUT/csv"
[ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$PYTHON" -c "import torch; print('torch', torch.__version__)"
for run in $RUNS; do
    k=${run%:*} seed=${run#*:}
    timeout -s INT "$LIMIT" "$PYTHON" -m powertrip.app.paper.fig11_plateau --device "$DEVICE" \
        --trainer vmap --rounds "$ROUNDS" --k "$k" --seed "$seed" --out "$OUT/csv" \
        > "$OUT/csv/k$k-seed$seed.log" 2>&1 &
done
wait
for log in "$OUT"/csv/*.log; do echo "== $log"; tail -n 3 "$log"; done
tar -C "$OUT" -czf "$OUT/plateau.tgz" csv

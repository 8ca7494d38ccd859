#!/usr/bin/env bash
# Figs. 8-9 at the plateau target (results/plateau-policies/): every arm at once on one GPU,
# each stopped (SIGINT: the finished rounds stay in its CSV) after LIMIT seconds. The CSVs
# and logs come back as one archive, $OUT/plateau-policies.tgz. From the repository root:
#   OUT=/tmp/pp LIMIT=530 bash results/plateau-policies/run-gpu.sh
# RUNS lists policy:params:seed (params as name=value,name=value; empty for none);
# DEVICE=cpu ROUNDS=2 tries the script on a machine with no GPU.
set -u
OUT=${OUT:?set OUT to a folder for the results}
LIMIT=${LIMIT:-530}
DEVICE=${DEVICE:-cuda}
ROUNDS=${ROUNDS:-400}
RUNS=${RUNS:-"static:k=5:0 static:k=10:0 static:k=20:0 static:k=50:0 powertrip::0 adaptive::0 static:k=10:5 static:k=20:5 powertrip::5 adaptive::5"}
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
mkdir -p "$OUT/csv"
[ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$PYTHON" -c "import torch; print('torch', torch.__version__)"
for run in $RUNS; do
    IFS=: read -r policy params seed <<< "$run"
    args=()
    arm=$policy
    for p in ${params//,/ }; do
        args+=(--param "$p")
        arm="$arm-${p/=/}"
    done
    timeout -s INT "$LIMIT" "$PYTHON" -m powertrip.app.paper.plateau_policies --device "$DEVICE" \
        --trainer vmap --policy "$policy" "${args[@]}" --seed "$seed" --arm "$arm" \
        --set "max_rounds=$ROUNDS" --out "$OUT/csv" > "$OUT/csv/$arm-seed$seed.log" 2>&1 &
done
wait
for log in "$OUT"/csv/*.log; do echo "== $log"; tail -n 2 "$log"; done
tar -C "$OUT" --exclude="*.ckpt.pt" -czf "$OUT/plateau-policies.tgz" csv

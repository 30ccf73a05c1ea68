#!/bin/bash
# The converge bench (benchmarks/converge.py) on a GPU machine that has the checkout, the data
# packed by `python -m gpu.carry` in .devdata and, where its Python lacks them, the wheels of
# soundfile, cffi, pycparser and soxr in .whl: every run a process of its own on the one GPU, all side
# by side, each stopped at an epoch end where another would pass the script's SECONDS; then, where
# the time left is more than 1.3 times what that took, seeds up to MORE_SEEDS the same way. What git
# keeps of bench/converge is packed into $OUT in 15 MB parts (`cat converge.tar.* | tar -xf - -C
# bench` here, then `git add bench/converge`).
#   OUT=DIR bash gpu/converge.sh [SECONDS] [ACCELERATOR] [more converge flags…]
# The carry: .devdata is 54 MiB of the 64 the device tool takes with the tracked tree, so the large
# tracked files the runs do not read (app/models/*.onnx, training/checkpoints/) go aside for the call
# (`git checkout -- app/models training/checkpoints` after); bench/converge/runs must travel where a
# run resumes. 2026-12-04: 56 of 64 MiB with nothing of bench/converge yet.
set -u
START=$(date +%s)
SECONDS_BUDGET=${1:-540}      # the whole script, packing included
MORE_SEEDS=${MORE_SEEDS:-5}
ACCELERATOR=${2:-gpu}
shift $(( $# < 2 ? $# : 2 ))
OUT=${OUT:-/tmp/converge_out}
PY=${PYTHON:-python3}
RUNS=${CONVERGE_OUT:-bench/converge}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 ROTKWS_CACHE=${ROTKWS_CACHE:-/tmp/rotkws_cache}
if ! $PY -c "import soundfile, soxr" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv -l 10 > "$OUT/gpu.csv" 2>&1 &
fi
SOURCES=$($PY -c 'from gpu.carry import SOURCES; print(SOURCES)') || exit 1
# the images decoded once, into the cache every run reads
$PY -c '
import concurrent.futures, sys
from pathlib import Path
from gpu.carry import IMAGE_ZIPS
from training.features import decode_zip
with concurrent.futures.ProcessPoolExecutor(len(IMAGE_ZIPS)) as pool:
    for z, (pixels, _, _) in zip(IMAGE_ZIPS, pool.map(decode_zip, [Path(".devdata") / z for z in IMAGE_ZIPS])):
        print(z, pixels.shape)
' || exit 1
(while sleep 30; do cp "$RUNS/state.json" "$OUT/" 2>/dev/null; done) &
hours_left() { $PY -c "print(max(0.0, ($SECONDS_BUDGET - 40 - ($(date +%s) - $START)) / 3600))"; }
converge() {   # converge.py with this machine's settings; $1: hours
    local hours=$1; shift
    $PY -m benchmarks.converge --accelerator "$ACCELERATOR" --jobs 16 --hours "$hours" --data .devdata \
        --set "data.sources=$SOURCES" --set trainer.precision=32-true --train-only --out "$RUNS" "$@" 2>&1 | tee -a "$OUT/converge.log"
    return "${PIPESTATUS[0]}"
}
t1=$(date +%s)
converge "$(hours_left)" "$@"      # never 0 (no deadline): SECONDS_BUDGET > 40 + the set-up
status=$?
took=$(( $(date +%s) - t1 ))
left=$(( SECONDS_BUDGET - 40 - ($(date +%s) - START) ))
if [ "$status" = 0 ] && [ $(( left * 10 )) -gt $(( took * 13 )) ]; then
    echo "[$(date +%T)] $took s for those; $left s left: seeds up to $MORE_SEEDS" | tee -a "$OUT/converge.log"
    converge "$(hours_left)" "$@" --seeds "$MORE_SEEDS"
    status=$?
fi
cp "$RUNS/state.json" "$OUT/" 2>/dev/null
tail -n 40 "$RUNS"/runs/*/seed*/train.log > "$OUT/train_tails.log" 2>/dev/null
tar -C "$(dirname "$RUNS")" -cf - --exclude=sweep --exclude=superseded --exclude=logs --exclude='*.log' \
    --exclude='*.onnx' "$(basename "$RUNS")" | split -b 15m - "$OUT/converge.tar."
ls -la "$OUT"
kill $(jobs -p) 2>/dev/null   # the GPU log and the state copier
exit "$status"

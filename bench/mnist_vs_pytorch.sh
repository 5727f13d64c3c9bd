#!/bin/sh
# bench/mnist_vs_pytorch.sh - kiln-train against PyTorch on Fashion-MNIST, same
# machine, same run. Usage: bench/mnist_vs_pytorch.sh [mlp|cnn] [epochs] [speed|full]
#
#  1. the machine's SGEMM peak (kiln-sgemm-peak);
#  2. speed: kiln (all cores, its own thread pool) and PyTorch with 1 and 2
#     threads, alternating, ROUNDS times, each over STEPS steps after warm-up;
#     best of each; PyTorch's best configuration is the peer. Ratio printed.
#  3. full (default): both train EPOCHS epochs (PyTorch in its best thread
#     configuration) and report test accuracy.
# Same model, data, standardisation, global batch 128, SGD momentum 0.9, lr
# 0.05 with cosine decay. PyTorch gets OPENBLAS_CORETYPE=SkylakeX (Debian's
# OpenBLAS otherwise uses generic kernels on this CPU); kiln gets nothing: it
# fixes the core selection itself. Env: BUILD (default build-rt), ROUNDS (3),
# STEPS (mlp 400, cnn 80), DATA_DIR.
set -eu
MODEL=${1:-mlp}
EPOCHS=${2:-5}
MODE=${3:-full}
BUILD=${BUILD:-build-rt}
ROUNDS=${ROUNDS:-3}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
if [ "$MODEL" = cnn ]; then STEPS=${STEPS:-80}; else STEPS=${STEPS:-400}; fi
KT="$BUILD/bin/kiln-train"
PY=/usr/bin/python3
HERE=$(dirname "$0")
num() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | tail -1; }
best() { awk 'BEGIN{m=0} {if ($1+0 > m) m=$1+0} END{printf "%.1f", m}'; }

echo "== machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
PEAK_JSON=$("$BUILD/bin/kiln-sgemm-peak")
echo "== sgemm peak: $PEAK_JSON"
PEAK=$(echo "$PEAK_JSON" | num sgemm_gflops_all)

echo "== speed: $MODEL, batch 128, $STEPS steps, $ROUNDS rounds"
: > /tmp/kbench.kiln.$$; : > /tmp/kbench.pt1.$$; : > /tmp/kbench.pt2.$$
FPS=0
r=0
while [ $r -lt "$ROUNDS" ]; do
    r=$((r + 1))
    # both sides leave their first 10 steps out of the timing (warm-up)
    K=$(env -u OPENBLAS_CORETYPE "$KT" mnist --model="$MODEL" --data_dir="$DATA_DIR" \
        --max_steps="$STEPS" --log_format=json | tail -1)
    echo "$K" | num samples_per_sec >> /tmp/kbench.kiln.$$
    # training FLOPs per example (GEMM-shaped layers), from kiln's own count
    FPS=$(awk "BEGIN{print $(echo "$K" | num train_gflops) * 1e9 / $(echo "$K" | num samples_per_sec)}")
    for t in 1 2; do
        P=$(OPENBLAS_CORETYPE=SkylakeX $PY "$HERE/pytorch_mnist.py" --model="$MODEL" \
            --data_dir="$DATA_DIR" --threads=$t --max_steps="$STEPS")
        echo "$P" | num samples_per_sec >> /tmp/kbench.pt$t.$$
    done
    echo "   round $r: kiln $(tail -1 /tmp/kbench.kiln.$$)  pytorch-1t $(tail -1 /tmp/kbench.pt1.$$)  pytorch-2t $(tail -1 /tmp/kbench.pt2.$$) samples/s"
done
KS=$(best < /tmp/kbench.kiln.$$)
P1=$(best < /tmp/kbench.pt1.$$)
P2=$(best < /tmp/kbench.pt2.$$)
rm -f /tmp/kbench.*.$$
PT=$P1; PTT=1
if awk "BEGIN{exit !($P2 > $P1)}"; then PT=$P2; PTT=2; fi
RATIO=$(awk "BEGIN{printf \"%.2f\", $KS / $PT}")
GFS=$(awk "BEGIN{printf \"%.0f\", $KS * $FPS / 1e9}")
FRAC=$(awk "BEGIN{printf \"%.2f\", $GFS / $PEAK}")
echo "RESULT speed $MODEL: kiln $KS samples/s, pytorch best $PT samples/s ($PTT thread(s)); ratio ${RATIO}x"
echo "RESULT kiln training at $KS samples/s = $GFS GFLOP/s = $FRAC of the measured all-core SGEMM peak ($PEAK GFLOP/s)"

[ "$MODE" = full ] || exit 0
echo "== accuracy: $EPOCHS epochs each"
K=$(env -u OPENBLAS_CORETYPE "$KT" mnist --model="$MODEL" --data_dir="$DATA_DIR" \
    --train_epochs="$EPOCHS" --log_format=json | tail -1)
P=$(OPENBLAS_CORETYPE=SkylakeX $PY "$HERE/pytorch_mnist.py" --model="$MODEL" \
    --data_dir="$DATA_DIR" --threads=$PTT --epochs="$EPOCHS")
KA=$(echo "$K" | num test_accuracy)
PA=$(echo "$P" | num test_accuracy)
echo "   kiln:    $K"
echo "   pytorch: $P"
echo "RESULT accuracy $MODEL after $EPOCHS epochs: kiln $KA, pytorch $PA, diff $(awk "BEGIN{printf \"%+.2f\", ($KA - $PA) * 100}") points"
echo "RESULT full-run throughput: kiln $(echo "$K" | num samples_per_sec), pytorch ($PTT t) $(echo "$P" | num samples_per_sec) samples/s"

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
GF=0
r=0
while [ $r -lt "$ROUNDS" ]; do
    r=$((r + 1))
    # kiln: +10 warm-up steps like the PyTorch side (its first steps are timed
    # with the rest, so this only makes kiln's number more conservative)
    K=$(env -u OPENBLAS_CORETYPE "$KT" mnist --model="$MODEL" --data_dir="$DATA_DIR" \
        --max_steps="$STEPS" --log_format=json | tail -1)
    echo "$K" | num samples_per_sec >> /tmp/kbench.kiln.$$
    GF=$(echo "$K" | num train_gflops)
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
FRAC=$(awk "BEGIN{printf \"%.2f\", $KS * ($GF / ($KS > 0 ? $KS : 1)) / $PEAK}")
echo "RESULT speed $MODEL: kiln $KS samples/s, pytorch best $PT samples/s ($PTT thread(s)); ratio ${RATIO}x"
echo "RESULT kiln training reaches $(awk "BEGIN{printf \"%.0f\", $GF * $KS / $(tail -1 /dev/null; echo $KS)}") GFLOP/s of the measured SGEMM peak $PEAK GFLOP/s: fraction $FRAC (last round's run)"

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

#!/bin/sh
# bench/mnist_vs_pytorch.sh - kiln-train against PyTorch on Fashion-MNIST, same
# machine, same run. Usage: bench/mnist_vs_pytorch.sh [mlp|cnn] [epochs] [speed|full]
#
#  1. speed: the machine's SGEMM peak (kiln-sgemm-peak), kiln (all cores, its
#     own thread pool) and PyTorch with 1 and 2 threads, alternating, ROUNDS
#     times, each over STEPS steps after warm-up; best of each; PyTorch's best
#     configuration is the peer. Ratio printed, and kiln's GFLOP/s as a
#     fraction of the best SGEMM peak of the same rounds.
#  2. full (default): for each seed in SEEDS, both train EPOCHS epochs with
#     that seed (PyTorch in its best thread configuration) and report test
#     accuracy; then each side's mean, spread (min..max) and sample standard
#     deviation, and the difference of the means. The seed fixes each side's
#     own weight init and data order; the two sides draw different numbers
#     from it, so only means over several seeds compare.
# Same model, data, standardisation, global batch 128, SGD momentum 0.9, lr
# 0.05 with cosine decay. PyTorch gets OPENBLAS_CORETYPE=SkylakeX (Debian's
# OpenBLAS otherwise uses generic kernels on this CPU); kiln gets nothing: it
# fixes the core selection itself. Env: BUILD (default build-rt), ROUNDS (3),
# STEPS (mlp 400, cnn 80), SEEDS ("0 1 2"), DATA_DIR; IM2COL=1 also runs kiln
# with KILN_CONV=im2col (its convolutions on the im2col + GEMM path instead of
# oneDNN's direct kernels) in every round and prints that ratio too.
set -eu
MODEL=${1:-mlp}
EPOCHS=${2:-5}
MODE=${3:-full}
BUILD=${BUILD:-build-rt}
ROUNDS=${ROUNDS:-3}
SEEDS=${SEEDS:-0 1 2}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
if [ "$MODEL" = cnn ]; then STEPS=${STEPS:-80}; else STEPS=${STEPS:-400}; fi
KT="$BUILD/bin/kiln-train"
PY=/usr/bin/python3
HERE=$(dirname "$0")
num() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | tail -1; }
best() { awk 'BEGIN{m=0} {if ($1+0 > m) m=$1+0} END{printf "%.1f", m}'; }

echo "== machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== speed: $MODEL, batch 128, $STEPS steps, $ROUNDS rounds"
: > /tmp/kbench.kiln.$$; : > /tmp/kbench.im2col.$$; : > /tmp/kbench.pt1.$$; : > /tmp/kbench.pt2.$$; : > /tmp/kbench.peak.$$
FPS=0
r=0
while [ $r -lt "$ROUNDS" ]; do
    r=$((r + 1))
    # the peak is measured each round too (a loaded round measures low)
    PEAK_JSON=$(env -u OPENBLAS_CORETYPE "$BUILD/bin/kiln-sgemm-peak")
    [ $r -gt 1 ] || echo "== sgemm peak (round 1): $PEAK_JSON"
    echo "$PEAK_JSON" | num sgemm_gflops_all >> /tmp/kbench.peak.$$
    # both sides leave their first 10 steps out of the timing (warm-up)
    K=$(env -u OPENBLAS_CORETYPE "$KT" mnist --device=/cpu:0 --model="$MODEL" --data_dir="$DATA_DIR" \
        --max_steps="$STEPS" --log_format=json | tail -1)
    echo "$K" | num samples_per_sec >> /tmp/kbench.kiln.$$
    # training FLOPs per example (GEMM-shaped layers), from kiln's own count
    FPS=$(awk "BEGIN{print $(echo "$K" | num train_gflops) * 1e9 / $(echo "$K" | num samples_per_sec)}")
    if [ "${IM2COL:-0}" = 1 ]; then
        env -u OPENBLAS_CORETYPE KILN_CONV=im2col "$KT" mnist --device=/cpu:0 --model="$MODEL" \
            --data_dir="$DATA_DIR" --max_steps="$STEPS" --log_format=json | tail -1 |
            num samples_per_sec >> /tmp/kbench.im2col.$$
        echo "   round $r: kiln with KILN_CONV=im2col $(tail -1 /tmp/kbench.im2col.$$) samples/s"
    fi
    for t in 1 2; do
        P=$(OPENBLAS_CORETYPE=SkylakeX $PY "$HERE/pytorch_mnist.py" --model="$MODEL" \
            --data_dir="$DATA_DIR" --threads=$t --max_steps="$STEPS")
        echo "$P" | num samples_per_sec >> /tmp/kbench.pt$t.$$
    done
    echo "   round $r: kiln $(tail -1 /tmp/kbench.kiln.$$)  pytorch-1t $(tail -1 /tmp/kbench.pt1.$$)  pytorch-2t $(tail -1 /tmp/kbench.pt2.$$) samples/s  sgemm peak $(tail -1 /tmp/kbench.peak.$$) GFLOP/s"
done
PEAK=$(best < /tmp/kbench.peak.$$)
KS=$(best < /tmp/kbench.kiln.$$)
P1=$(best < /tmp/kbench.pt1.$$)
P2=$(best < /tmp/kbench.pt2.$$)
KI=$(best < /tmp/kbench.im2col.$$)
rm -f /tmp/kbench.*.$$
PT=$P1; PTT=1
if awk "BEGIN{exit !($P2 > $P1)}"; then PT=$P2; PTT=2; fi
RATIO=$(awk "BEGIN{printf \"%.2f\", $KS / $PT}")
GFS=$(awk "BEGIN{printf \"%.0f\", $KS * $FPS / 1e9}")
FRAC=$(awk "BEGIN{printf \"%.2f\", $GFS / $PEAK}")
echo "RESULT speed $MODEL: kiln $KS samples/s, pytorch best $PT samples/s ($PTT thread(s)); ratio ${RATIO}x"
if [ "${IM2COL:-0}" = 1 ]; then
    echo "RESULT speed $MODEL, kiln KILN_CONV=im2col: $KI samples/s; ratio $(awk "BEGIN{printf \"%.2f\", $KI / $PT}")x"
fi
echo "RESULT kiln training at $KS samples/s = $GFS GFLOP/s = $FRAC of the measured all-core SGEMM peak ($PEAK GFLOP/s)"

[ "$MODE" = full ] || exit 0
echo "== accuracy: $EPOCHS epochs each, seeds $SEEDS"
: > /tmp/kbench.ka.$$; : > /tmp/kbench.pa.$$
for seed in $SEEDS; do
    K=$(env -u OPENBLAS_CORETYPE "$KT" mnist --device=/cpu:0 --model="$MODEL" --data_dir="$DATA_DIR" \
        --train_epochs="$EPOCHS" --seed="$seed" --log_format=json | tail -1)
    P=$(OPENBLAS_CORETYPE=SkylakeX $PY "$HERE/pytorch_mnist.py" --model="$MODEL" \
        --data_dir="$DATA_DIR" --threads=$PTT --epochs="$EPOCHS" --seed="$seed")
    echo "$K" | num test_accuracy >> /tmp/kbench.ka.$$
    echo "$P" | num test_accuracy >> /tmp/kbench.pa.$$
    echo "   seed $seed kiln:    $K"
    echo "   seed $seed pytorch: $P"
done
# mean, min..max and sample standard deviation of one column of numbers
stats() { awk '{s+=$1; q+=$1*$1; if(NR==1||$1<lo)lo=$1; if(NR==1||$1>hi)hi=$1}
    END{m=s/NR; v=NR>1?(q-NR*m*m)/(NR-1):0; if(v<0)v=0;
        printf "mean %.4f, min %.4f, max %.4f, sd %.4f (n=%d)", m, lo, hi, sqrt(v), NR}'; }
mean() { awk '{s+=$1} END{printf "%.6f", s/NR}'; }
KM=$(mean < /tmp/kbench.ka.$$)
PM=$(mean < /tmp/kbench.pa.$$)
echo "RESULT accuracy $MODEL after $EPOCHS epochs, seeds $SEEDS:"
echo "RESULT   kiln    $(stats < /tmp/kbench.ka.$$)"
echo "RESULT   pytorch $(stats < /tmp/kbench.pa.$$)"
echo "RESULT   difference of the means: $(awk "BEGIN{printf \"%+.2f\", ($KM - $PM) * 100}") points"
rm -f /tmp/kbench.ka.$$ /tmp/kbench.pa.$$

#!/bin/sh
# bench/resnet50_vs_pytorch.sh - ResNet-50 v1.5 training throughput on
# synthetic data: kiln-train resnet50 --synthetic against PyTorch
# (bench/pytorch_resnet50.py), same machine, same run, alternating rounds,
# best of ROUNDS each, each side with 1 thread and with THREADS threads (on
# a shared 2-core machine one thread is often faster), 2 warm-up steps on
# both sides; prints images/sec of both and the ratio.
#
# DEVICE=cuda runs both on the first GPU instead, fp32 with TF32 off
# (bench/gpu_vs_pytorch.sh adds tf32, the MLP and MFU: docs/gpu-training.md).
# Env: BUILD (build), ROUNDS (3), BATCH (8), IMAGE (224), STEPS (3),
# THREADS (both sides; default: all cores), DEVICE (cpu).
set -eu
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-8}
IMAGE=${IMAGE:-224}
STEPS=${STEPS:-3}
DEVICE=${DEVICE:-cpu}
THREADS=${THREADS:-$(nproc)}
HERE=$(dirname "$0")
KT="$BUILD/bin/kiln-train"
PY=/usr/bin/python3
best() { awk 'BEGIN{m=0} {if ($1+0 > m) m=$1+0} END{printf "%.2f", m}'; }

echo "== machine: $(nproc) cpus,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== resnet50 v1.5 synthetic: batch $BATCH, ${IMAGE}x$IMAGE, $STEPS timed steps, $ROUNDS rounds, $DEVICE"
: > /tmp/r50.kiln.$$; : > /tmp/r50.pt.$$
r=0
while [ $r -lt "$ROUNDS" ]; do
    r=$((r + 1))
    kall=""
    if [ "$DEVICE" = cpu ]; then
        for t in 1 "$THREADS"; do
            k=$(env -u OPENBLAS_CORETYPE "$KT" resnet50 --synthetic --device=/cpu:0 \
                --batch_size="$BATCH" --image_size="$IMAGE" --num_batches="$STEPS" \
                --num_warmup_batches=2 --threads="$t" | sed -n 's/^total images\/sec: //p')
            echo "$k" >> /tmp/r50.kiln.$$
            kall="$kall ${t}t=$k"
        done
    else
        # fp32 (TF32 off), as the PyTorch runs below
        k=$("$KT" resnet50 --synthetic --device=/gpu:0 --batch_size="$BATCH" \
            --image_size="$IMAGE" --num_batches="$STEPS" --num_warmup_batches=2 |
            sed -n 's/^total images\/sec: //p')
        echo "$k" >> /tmp/r50.kiln.$$
        kall=" gpu=$k"
    fi
    # PyTorch with 1 thread and with THREADS: OpenMP spinning collapses on
    # a shared 2-core machine, so its better configuration is the peer
    pall=""
    for t in 1 "$THREADS"; do
        p=$(OPENBLAS_CORETYPE=SkylakeX "$PY" "$HERE/pytorch_resnet50.py" --device "$DEVICE" \
            --batch_size "$BATCH" --image_size "$IMAGE" --steps "$STEPS" --warmup 2 \
            --rounds 1 --threads "$t" | sed -n 's/.*"images_per_sec": \([0-9.]*\).*/\1/p')
        echo "$p" >> /tmp/r50.pt.$$
        pall="$pall ${t}t=$p"
        [ "$DEVICE" = cpu ] || break
    done
    echo "round $r: kiln${kall:- n/a} images/sec, pytorch$pall images/sec"
done
K=$(best < /tmp/r50.kiln.$$)
P=$(best < /tmp/r50.pt.$$)
rm -f /tmp/r50.kiln.$$ /tmp/r50.pt.$$
echo "== best: kiln $K images/sec, pytorch $P images/sec ($DEVICE)"
echo "== ratio kiln/pytorch: $(awk -v k="$K" -v p="$P" 'BEGIN{ if (p > 0) printf "%.2f", k / p; else print "n/a" }')"

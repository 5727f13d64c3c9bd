#!/bin/sh
# bench/resnet50_vs_pytorch.sh - ResNet-50 v1.5 training throughput on
# synthetic data: kiln-train resnet50 --synthetic against PyTorch
# (bench/pytorch_resnet50.py), same machine, same run, alternating rounds,
# best of ROUNDS each; prints images/sec of both and the ratio.
#
# Today kiln runs on the CPU only, so DEVICE=cpu is the only kiln side that
# exists; on a GPU machine DEVICE=cuda runs just the PyTorch peer (the target
# numbers, see docs/gpu.md) until the CUDA path is wired into the runtime.
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
    if [ "$DEVICE" = cpu ]; then
        k=$(env -u OPENBLAS_CORETYPE "$KT" resnet50 --synthetic --batch_size="$BATCH" \
            --image_size="$IMAGE" --num_batches="$STEPS" --num_warmup_batches=1 \
            --threads="$THREADS" | sed -n 's/^total images\/sec: //p')
        echo "$k" >> /tmp/r50.kiln.$$
    fi
    p=$(OPENBLAS_CORETYPE=SkylakeX "$PY" "$HERE/pytorch_resnet50.py" --device "$DEVICE" \
        --batch_size "$BATCH" --image_size "$IMAGE" --steps "$STEPS" --warmup 1 --rounds 1 \
        --threads "$THREADS" | sed -n 's/.*"images_per_sec": \([0-9.]*\).*/\1/p')
    echo "$p" >> /tmp/r50.pt.$$
    echo "round $r: kiln ${k:-n/a} images/sec, pytorch $p images/sec"
done
K=$(best < /tmp/r50.kiln.$$)
P=$(best < /tmp/r50.pt.$$)
rm -f /tmp/r50.kiln.$$ /tmp/r50.pt.$$
echo "== best: kiln $K images/sec, pytorch $P images/sec"
if [ "$DEVICE" = cpu ]; then
    echo "== ratio kiln/pytorch: $(awk -v k="$K" -v p="$P" 'BEGIN{printf "%.2f", k / p}')"
fi

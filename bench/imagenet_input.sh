#!/bin/sh
# bench/imagenet_input.sh [BUILD=build] [ROUNDS=3]: ImageNet input pipelines,
# kiln's reader (kiln-imagenet-input: src/runtime/data/imagenet.c) against
# TensorFlow's tf.data (bench/tf_imagenet_input.py: the official ResNet's
# pipeline) on the same TFRecord files, alternating per round, best of
# ROUNDS each; prints both images/s and the ratio. The files: 256 JPEGs of
# 330-500 pixels a side in 4 files, written by TensorFlow
# (tests/runtime/make_imagenet_records.py). Env BATCH (64), SIZE (224),
# THREADS (0: all cores), BATCHES (20), DATA (a directory of train-* files
# to use instead), PY (the TensorFlow venv's python).
set -eu
BUILD=${1:-build}
ROUNDS=${2:-3}
PY=${PY:-${KILN_PYENV:-$HOME/.cache/kiln/tf-venv}/bin/python}
BATCH=${BATCH:-64} SIZE=${SIZE:-224} THREADS=${THREADS:-0} BATCHES=${BATCHES:-20}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
DATA=${DATA:-}
if [ -z "$DATA" ]; then
    DATA=$TMP/data
    "$PY" "$HERE/../tests/runtime/make_imagenet_records.py" "$DATA" 4 64 10 330 500 > /dev/null
fi
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
echo "data: $DATA ($(du -sh "$DATA" | cut -f1))"
best() { sed -n "s/^$1 images\/s: \([0-9.]*\).*/\1/p" "$2" | sort -g | tail -1; }
for r in $(seq 1 "$ROUNDS"); do
    "$BUILD/bin/kiln-imagenet-input" "$DATA" "$BATCH" "$SIZE" "$THREADS" "$BATCHES" | tee -a "$TMP/kiln"
    "$PY" "$HERE/tf_imagenet_input.py" "$DATA" "$BATCH" "$SIZE" "$THREADS" "$BATCHES" | tee -a "$TMP/tf"
done
K=$(best kiln "$TMP/kiln") T=$(best tf.data "$TMP/tf")
echo "best of $ROUNDS: kiln $K images/s, tf.data $T images/s"
awk -v k="$K" -v t="$T" 'BEGIN { printf "RATIO imagenet_input=%.2f (kiln / tf.data)\n", k / t }'

#!/bin/bash
# tests/service/it_mnist.sh - `--module-name kiln.mnist` runs kiln-train as a
# kiln job (master + worker) and succeeds. Skipped (77) with the reason when
# the build has no kiln-train yet.
. "$(dirname "$0")/lib.sh"
if [ ! -x "$BUILD/bin/kiln-train" ]; then
    echo "SKIP: $BUILD/bin/kiln-train is not built (the training runtime)"
    exit 77
fi
start_kilnd "$T/d" --kiln-train "$BUILD/bin/kiln-train"
# KILN_MNIST_ARGS: extra kiln-train arguments (e.g. a short run: --epochs 1)
# shellcheck disable=SC2086
timeout 170 "$KILN" jobs submit training mnist_1 --module-name kiln.mnist \
    --region us-central1 --job-dir "$T/jobdir" \
    --stream-logs -- ${KILN_MNIST_ARGS:---model=mlp --train_epochs=1 --train_examples=2000} >"$T/logs" 2>&1
check_eq "kiln.mnist job SUCCEEDED (stream-logs exit)" "$?" 0
check "master logged" grep -qP '\tmaster-replica-0\t' "$T/logs"
check "kiln-train started" grep -q 'kiln-train' "$T/logs"
check "checkpoint in the job dir" test -n "$(ls -A "$T/jobdir" 2>/dev/null)"
finish

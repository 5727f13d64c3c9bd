#!/bin/sh
# tests/cuda/test_resnet50_variant.sh KILN_TRAIN CUDA_BUILT(0|1)
# `kiln-train resnet50 --variant` (models/resnet_variant.c): the list names
# the built and the not-built variants; a variant not built, an unknown one
# (flag or KILN_RESNET_VARIANT), a GPU variant and --check on the CPU path
# are refused (exit 2) by name; base trains on the CPU. Where a GPU is
# visible, fused, nchw and bn-cudnn pass --check and the log names each.
set -u
KT=$1
BUILT=$2
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
SMALL="--synthetic --width=4 --image_size=32 --batch_size=2 --num_batches=1 --num_warmup_batches=0"

# refused: WANT_WORDS ARGS...: exit 2 and the words on stderr
refused() {
    words=$1
    shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc != 2 ] || ! grep -q -- "$words" "$tmp/err"; then
        echo "FAIL: $* exited $rc (want 2, '$words'): $(cat "$tmp/err")"
        fail=1
    else
        echo "ok: $* -> $(head -1 "$tmp/err")"
    fi
}

"$KT" resnet50 --list_variants >"$tmp/list" 2>&1 || { echo "FAIL: --list_variants"; fail=1; }
cat "$tmp/list"
for w in "^base	built" "^fused	built" "^bn-cudnn	built" "^nchw	built" \
    "^bf16-storage	not built" "^cudnn-graph	not built" "^cublaslt-fc	built"; do
    grep -q "$w" "$tmp/list" || { echo "FAIL: the list lacks '$w'"; fail=1; }
done

# shellcheck disable=SC2086
refused "'cudnn-graph' (cuDNN's graph API: convolution + scale/bias + ReLU fused) is not built yet" \
    "$KT" resnet50 $SMALL --device=/cpu:0 --variant=cudnn-graph
# shellcheck disable=SC2086
refused "applies to fp32, tf32 only" "$KT" resnet50 $SMALL --device=/cpu:0 --variant=nchw \
    --precision=bf16
# shellcheck disable=SC2086
refused "variants are the GPU step's" "$KT" resnet50 $SMALL --device=/cpu:0 --variant=nchw
# shellcheck disable=SC2086
refused "unknown feature 'fusd'" "$KT" resnet50 $SMALL --device=/cpu:0 --variant=fusd
# shellcheck disable=SC2086
refused "applies to bf16 only" "$KT" resnet50 $SMALL --device=/cpu:0 --variant=bf16-storage
# shellcheck disable=SC2086
refused "KILN_RESNET_VARIANT=bogus" env KILN_RESNET_VARIANT=bogus "$KT" resnet50 $SMALL \
    --device=/cpu:0
# shellcheck disable=SC2086
refused "variants are the GPU step's" "$KT" resnet50 $SMALL --device=/cpu:0 --variant=fused
# shellcheck disable=SC2086
refused "nothing to compare on /cpu:0" "$KT" resnet50 $SMALL --device=/cpu:0 --check
# shellcheck disable=SC2086
if "$KT" resnet50 $SMALL --device=/cpu:0 --variant=base >"$tmp/out" 2>&1; then
    echo "ok: --variant=base trains on the CPU"
else
    echo "FAIL: --variant=base on the CPU: $(tail -3 "$tmp/out")"
    fail=1
fi

if [ "$BUILT" = 1 ] && "$KT" devices --device=/gpu:0 >/dev/null 2>&1; then
    for v in fused nchw bn-cudnn cublaslt-fc; do
        "$KT" resnet50 --synthetic --width=8 --image_size=64 --batch_size=8 --num_batches=2 \
            --num_warmup_batches=1 --device=/gpu:0 --variant=$v --check >"$tmp/gpu" 2>&1
        rc=$?
        cat "$tmp/gpu"
        [ $rc = 0 ] && grep -q "^CHECK variant=$v .* ok$" "$tmp/gpu" &&
            grep -q "^Variant:     $v (from --variant)" "$tmp/gpu" ||
            { echo "FAIL: --variant=$v --check on /gpu:0 (rc $rc)"; fail=1; }
    done
else
    echo "no GPU part: $( [ "$BUILT" = 1 ] && echo "no GPU visible" || echo "the CUDA backend is not built")"
fi
[ $fail = 0 ] && echo "all passed"
exit $fail

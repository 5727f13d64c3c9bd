#!/bin/sh
# tests/runtime/test_train_resnet50.sh KILN_TRAIN - `kiln-train resnet50
# --synthetic`: a small run (width 4, 64x64 images) prints tf_cnn_benchmarks'
# lines with finite, positive rates and a falling loss; bad flags exit 2 with
# a message, a GPU that cannot be used exits 1 naming it.
set -u
KT=$1
fail=0
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT

"$KT" resnet50 --synthetic --device=/cpu:0 --batch_size=2 --image_size=64 --width=4 \
    --num_batches=4 --num_warmup_batches=1 >"$out" 2>&1 || { cat "$out"; echo "run failed"; exit 1; }
cat "$out"
grep -q '^Model: *resnet50 (v1.5, width 4' "$out" || { echo "no model line"; fail=1; }
[ "$(grep -c 'images/sec: [0-9.]* +/- ' "$out")" -eq 4 ] || { echo "want 4 step lines"; fail=1; }
awk '/^total images\/sec: / { if ($3 + 0 > 0) ok = 1 } END { exit !ok }' "$out" ||
    { echo "no positive total images/sec"; fail=1; }
# the loss of the last step is below the first's (the same batch every step)
awk -F'\t' '/^[0-9]+\t/ { if (!n++) first = $3; last = $3 }
            END { exit !(n == 4 && last + 0 < first + 0) }' "$out" ||
    { echo "loss did not fall"; fail=1; }

expect2() {
    "$KT" resnet50 "$@" >/dev/null 2>"$out.err"
    rc=$?
    [ $rc -eq 2 ] || { echo "resnet50 $*: exit $rc, want 2"; fail=1; }
    grep -q "$EXPECT" "$out.err" || { echo "resnet50 $*: no '$EXPECT' in: $(cat "$out.err")"; fail=1; }
    rm -f "$out.err"
}
EXPECT='give --synthetic (random images) or --data_dir' expect2 --batch_size=2
EXPECT='expected an integer' expect2 --synthetic --batch_size=0
EXPECT='unknown or incomplete' expect2 --synthetic --bogus=1
EXPECT='index must be a decimal' expect2 --synthetic --device=/gpu:x
EXPECT='the CPU path is fp32 only' expect2 --synthetic --device=/cpu:0 --precision=tf32
EXPECT='the CPU path is fp32 only' expect2 --synthetic --device=/cpu:0 --precision=bf16
EXPECT='the CPU path is fp32 only' expect2 --synthetic --device=/cpu:0 --precision=fp16
EXPECT='expected fp32, tf32, bf16 or fp16' expect2 --synthetic --precision=fp8
# --display_every on the CPU: a line every 2 steps and the last
"$KT" resnet50 --synthetic --device=/cpu:0 --batch_size=2 --image_size=64 --width=4 \
    --num_batches=5 --num_warmup_batches=0 --display_every=2 >"$out.d" 2>&1
[ "$(grep -c 'images/sec: [0-9.]* +/- ' "$out.d")" -eq 3 ] ||
    { echo "--display_every=2 over 5 steps: want 3 lines: $(cat "$out.d")"; fail=1; }
rm -f "$out.d"
EXPECT='no CPU compute threads' expect2 --synthetic --device=/gpu:0 --threads=4
# a GPU that cannot be used (none here, or no driver, or no CUDA backend):
# exit 1 and a message naming it, never a quiet CPU run
if ! "$KT" devices --device=/gpu:0 >/dev/null 2>&1; then
    "$KT" resnet50 --synthetic --device=/gpu:0 --batch_size=2 --image_size=64 --width=4 \
        --num_batches=1 >/dev/null 2>"$out.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q '/gpu:0' "$out.err" ||
        { echo "resnet50 --device=/gpu:0 without a GPU: exit $rc: $(cat "$out.err")"; fail=1; }
    rm -f "$out.err"
fi
[ $fail -eq 0 ] && echo "resnet50: all checks passed"
exit $fail

#!/bin/sh
# tests/runtime/test_train_cli.sh - kiln-train's command line: flags, errors,
# the JSON log contract, TensorBoard files and inspect.
# Usage: test_train_cli.sh KILN_TRAIN
set -u
KT=${1:?usage: test_train_cli.sh path/to/kiln-train}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0; failc=0
ok() { if eval "$2"; then pass=$((pass + 1)); else failc=$((failc + 1)); echo "FAIL: $1"; fi; }

"$KT" mnist --model=resnet > /dev/null 2> "$TMP/e1"; rc=$?
ok "unknown model -> exit 2" '[ $rc = 2 ] && grep -q "expected mlp or cnn" "$TMP/e1"'
"$KT" mnist --batch_size=0 > /dev/null 2>&1; rc=$?
ok "batch_size 0 rejected" '[ $rc = 2 ]'
"$KT" mnist --bogus_flag=1 > /dev/null 2> "$TMP/e2"; rc=$?
ok "unknown flag rejected" '[ $rc = 2 ] && grep -q "unknown argument" "$TMP/e2"'
"$KT" mnist --data_dir="$TMP/nowhere" > /dev/null 2> "$TMP/e3"; rc=$?
ok "missing data dir -> clear error" '[ $rc = 1 ] && grep -q "loading data" "$TMP/e3"'
mkdir -p "$TMP/bad"
printf 'not an idx file' | gzip > "$TMP/bad/train-images-idx3-ubyte.gz"
cp /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz "$TMP/bad/" 2>/dev/null
"$KT" mnist --data_dir="$TMP/bad" > /dev/null 2> "$TMP/e4"; rc=$?
ok "corrupt data file -> error naming it" '[ $rc = 1 ] && grep -q "train-images" "$TMP/e4"'

# a short run with a model dir (--job-dir spelling, space-separated value)
"$KT" mnist --job-dir "$TMP/m" --train_examples=1024 --train_epochs=2 --batch_size=128 \
    --threads=2 --log_format=json > "$TMP/log" 2> "$TMP/err"; rc=$?
ok "short run exits 0" '[ $rc = 0 ]'
ok "first line is start" 'head -1 "$TMP/log" | grep -q "\"event\":\"start\""'
ok "last line is done with the contract keys" \
   'tail -1 "$TMP/log" | grep "\"event\":\"done\"" | grep "\"test_accuracy\":" | grep "\"samples_per_sec\":" | grep -q "\"steps\":16"'
ok "two epoch lines" '[ "$(grep -c "\"event\":\"epoch\"" "$TMP/log")" = 2 ]'
ok "TensorBoard train events" 'ls "$TMP/m/train/"events.out.tfevents.* > /dev/null 2>&1'
ok "TensorBoard eval events" 'ls "$TMP/m/eval/"events.out.tfevents.* > /dev/null 2>&1'
ok "checkpoints written" 'ls "$TMP/m/"ckpt-*.kiln > /dev/null 2>&1'
"$KT" inspect "$TMP/m" > "$TMP/insp"; rc=$?
ok "inspect dir -> step 16 and a sha256" \
   '[ $rc = 0 ] && grep -q "\"step\":16" "$TMP/insp" && grep -Eq "\"sha256\":\"[0-9a-f]{64}\"" "$TMP/insp"'
# a finished run restarted is a no-op that reports the same result
"$KT" mnist --model_dir="$TMP/m" --train_examples=1024 --train_epochs=2 --threads=2 \
    --log_format=json > "$TMP/log2" 2>&1; rc=$?
ok "restart of a finished run" '[ $rc = 0 ] && grep -q "\"event\":\"restored\"" "$TMP/log2" && tail -1 "$TMP/log2" | grep -q "\"steps\":16"'
# incompatible flags on an existing model dir are refused, not silently mixed
"$KT" mnist --model_dir="$TMP/m" --model=cnn --train_examples=1024 > /dev/null 2> "$TMP/e5"; rc=$?
ok "mismatched checkpoint config refused" '[ $rc = 1 ] && grep -q "was written with" "$TMP/e5"'
# a diverged run (NaN loss) still writes JSON lines: null, never "nan"
"$KT" mnist --train_examples=512 --train_epochs=1 --learning_rate=1e6 --threads=1 \
    --log_format=json > "$TMP/nan" 2>&1; rc=$?
ok "a diverged run's lines are all JSON, its loss null" \
   '[ $rc = 0 ] && ! grep -qi "nan" "$TMP/nan" && tail -1 "$TMP/nan" | grep -q "\"test_loss\":null"'
# 2 local replicas on GPUs take /gpu:0 and /gpu:1: where the process sees
# fewer than 2, one refusal naming them before any replica starts, exit 2
"$KT" mnist --world_size=2 --device=/gpu:0 --train_examples=256 > /dev/null 2> "$TMP/e9"; rc=$?
if "$KT" devices 2> /dev/null | grep -q '/gpu:1'; then
    ok "--device=/gpu:0 with 2 replicas on 2 GPUs trains" '[ $rc = 0 ]'
else
    ok "--device=/gpu:0 with 2 replicas and under 2 GPUs refused once, before they start" \
       '[ $rc = 2 ] && [ "$(grep -c "replica r trains on /gpu:0+r, up to /gpu:1, and this process sees" "$TMP/e9")" = 1 ]'
fi
printf 'garbage' > "$TMP/garbage.kiln"
"$KT" inspect "$TMP/garbage.kiln" > /dev/null 2>&1; rc=$?
ok "inspect of a corrupt file fails" '[ $rc != 0 ]'
echo "$pass passed, $failc failed"
[ $failc = 0 ]

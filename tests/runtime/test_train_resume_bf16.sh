#!/bin/sh
# tests/runtime/test_train_resume_bf16.sh KILN_TRAIN - mixed precision in
# kiln-train on the CPU (the CPU backend table: the reference rounding,
# docs/gpu-training.md): --precision=bf16 trains and says so, ends elsewhere
# than fp32 from the same seed, is resumed in fp32 only with a warning,
# fp16's done line carries its loss scale, which its checkpoints keep (a
# resume goes on from it; --loss_scale_growth_interval is fp16's only), bf16
# with 2 replicas trains and resumes bit-identically (its sharded optimizer
# refused), and test_train_resume.sh's kill-and-resume in
# fp16 (the scale doubling every 5 steps) and in bf16 ends with the
# uninterrupted run's SHA-256 (checkpoints hold the fp32 masters).
set -u
KT=${1:?usage: test_train_resume_bf16.sh path/to/kiln-train}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sha() { "$KT" inspect "$1" | sed -n 's/.*"sha256":"\([0-9a-f]*\)".*/\1/p'; }
A="--model=mlp --train_epochs=1 --train_examples=640 --batch_size=64 --threads=2 --seed=3 \
   --log_format=json --device=/cpu:0"
# shellcheck disable=SC2086
"$KT" mnist $A --model_dir="$TMP/fp32" > "$TMP/fp32.log" 2>&1 || fail "fp32: $(tail -3 "$TMP/fp32.log")"
# shellcheck disable=SC2086
"$KT" mnist $A --precision=bf16 --model_dir="$TMP/bf16" > "$TMP/bf16.log" 2>&1 ||
    fail "bf16: $(tail -3 "$TMP/bf16.log")"
grep -q '"precision":"bf16"' "$TMP/bf16.log" || fail "the start line does not say bf16: $(head -2 "$TMP/bf16.log")"
S32=$(sha "$TMP/fp32"); S16=$(sha "$TMP/bf16")
[ -n "$S32" ] && [ -n "$S16" ] || fail "no sha256"
[ "$S32" != "$S16" ] || fail "bf16 ended bit-identical to fp32: nothing was rounded"
# a bf16 checkpoint resumed in fp32 (2 epochs: one more to train) goes on, with a warning
# shellcheck disable=SC2086
"$KT" mnist $A --train_epochs=2 --model_dir="$TMP/bf16" > "$TMP/mix.log" 2>&1 ||
    fail "fp32 resume of bf16: $(tail -3 "$TMP/mix.log")"
grep -q 'resuming in fp32 a checkpoint trained in bf16' "$TMP/mix.log" ||
    fail "no warning for a resume across precisions: $(head -3 "$TMP/mix.log")"
# fp16: its done line says the loss scale and the steps it skipped
# shellcheck disable=SC2086
"$KT" mnist $A --precision=fp16 --model_dir="$TMP/fp16" > "$TMP/fp16.log" 2>&1 ||
    fail "fp16: $(tail -3 "$TMP/fp16.log")"
grep -q '"event":"done".*"loss_scale":[0-9]*,"skipped_steps":[0-9]*}' "$TMP/fp16.log" ||
    fail "fp16: no loss scale in: $(tail -1 "$TMP/fp16.log")"
# fp16's loss scaler is in its checkpoints: with a growth interval of 3, 10
# steps take 65536 to 2^19, and 10 more after a resume to 2^22 (a scaler
# started over would end at 2^19 again)
LS="--precision=fp16 --loss_scale_growth_interval=3"
# shellcheck disable=SC2086
"$KT" mnist $A $LS --model_dir="$TMP/ls" > "$TMP/ls1.log" 2>&1 || fail "fp16 (interval 3): $(tail -3 "$TMP/ls1.log")"
grep -q '"steps":10,.*"loss_scale":524288,"skipped_steps":0}' "$TMP/ls1.log" ||
    fail "fp16, 10 steps, interval 3: $(tail -1 "$TMP/ls1.log")"
# shellcheck disable=SC2086
"$KT" mnist $A $LS --train_epochs=2 --model_dir="$TMP/ls" > "$TMP/ls2.log" 2>&1 ||
    fail "fp16 resumed: $(tail -3 "$TMP/ls2.log")"
grep -q '"loss_scale":4.1943e+06,"skipped_steps":0}' "$TMP/ls2.log" ||
    fail "fp16 resumed: the loss scale did not go on from the checkpoint's: $(tail -1 "$TMP/ls2.log")"
# the flag is fp16's: refused by name in another precision
"$KT" mnist --loss_scale_growth_interval=3 --train_examples=64 --model_dir="$TMP/ls32" \
    > "$TMP/ls32.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- '--loss_scale_growth_interval' "$TMP/ls32.log" ||
    fail "--loss_scale_growth_interval in fp32: exit $rc: $(cat "$TMP/ls32.log")"
# data parallel in bf16: 2 replicas train through the device path (the
# gradient summed on the host between them), end elsewhere than 2 fp32
# replicas, and killed as a group after a checkpoint and resumed end with
# the uninterrupted 2-replica run's SHA-256; --shard_optimizer (the CPU's
# fp32 path only) is refused by name before any replica starts
D="--model=mlp --train_epochs=1 --train_examples=1280 --batch_size=64 --world_size=2 --threads=1 \
   --seed=5 --log_format=json --checkpoint_steps=4"
# shellcheck disable=SC2086
"$KT" mnist $D --precision=bf16 --model_dir="$TMP/dp" > "$TMP/dp.log" 2>&1 ||
    fail "bf16 with 2 replicas: $(tail -3 "$TMP/dp.log")"
tail -1 "$TMP/dp.log" | grep -q '"event":"done".*"replicas":2' ||
    fail "bf16 with 2 replicas did not end with done: $(tail -1 "$TMP/dp.log")"
# shellcheck disable=SC2086
"$KT" mnist $D --shard_optimizer=0 --model_dir="$TMP/dp32" > "$TMP/dp32.log" 2>&1 ||
    fail "fp32 with 2 replicas: $(tail -3 "$TMP/dp32.log")"
SDP=$(sha "$TMP/dp")
[ -n "$SDP" ] && [ "$SDP" != "$(sha "$TMP/dp32")" ] || fail "2 bf16 replicas ended as 2 fp32 ones ($SDP)"
killgroup() { kill -KILL "$1" $(ps -o pid= --ppid "$1") 2> /dev/null; }
# shellcheck disable=SC2086
"$KT" mnist $D --precision=bf16 --model_dir="$TMP/dpk" > "$TMP/dpk.log" 2>&1 &
LP=$!
w=0
while ! ls "$TMP/dpk"/ckpt-*.kiln > /dev/null 2>&1 && [ $w -lt 600 ]; do
    sleep 0.02; w=$((w + 1)); done
killgroup "$LP"
wait "$LP" 2> /dev/null
# shellcheck disable=SC2086
"$KT" mnist $D --precision=bf16 --model_dir="$TMP/dpk" >> "$TMP/dpk.log" 2>&1 ||
    fail "2 bf16 replicas resumed: $(tail -3 "$TMP/dpk.log")"
grep -q '"event":"restored"' "$TMP/dpk.log" || echo "note: the kill came after the run ended; nothing restored"
[ "$(sha "$TMP/dpk")" = "$SDP" ] || fail "2 bf16 replicas killed and resumed end elsewhere than uninterrupted"
"$KT" mnist --world_size=2 --precision=bf16 --shard_optimizer=1 --train_examples=64 \
    --model_dir="$TMP/dps" > "$TMP/dps.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- '--shard_optimizer' "$TMP/dps.log" ||
    fail "bf16 with --shard_optimizer: exit $rc: $(cat "$TMP/dps.log")"
echo "bf16 sha256 $S16 differs from fp32's $S32"
N=3000; EPOCHS=2; KILLS=8
if [ "${KILN_TEST_SANITIZED:-0}" = 1 ]; then N=1000; KILLS=5; fi
# fp16 with a short growth interval (the scale doubles every 5 steps): a
# kill-and-resume ends bit-identical only if the scaler comes back whole
RESUME_N=$N RESUME_EPOCHS=$EPOCHS RESUME_KILLS=$KILLS \
    RESUME_EXTRA="--precision=fp16 --loss_scale_growth_interval=5" \
    sh "$(dirname "$0")/test_train_resume.sh" "$KT" || fail "the fp16 kill-and-resume"
RESUME_N=$N RESUME_EPOCHS=$EPOCHS RESUME_KILLS=$KILLS RESUME_EXTRA=--precision=bf16 \
    exec sh "$(dirname "$0")/test_train_resume.sh" "$KT"

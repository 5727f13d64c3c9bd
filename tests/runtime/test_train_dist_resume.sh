#!/bin/sh
# tests/runtime/test_train_dist_resume.sh - 2 replicas resume bit-exactly.
#
# A reference 2-replica run (--world_size=2) trains without interruption. A
# second 2-replica run in another model dir is SIGKILLed as a whole group
# (launcher and both replicas at once, as a lost machine would be) at random
# moments and restarted until it finishes; the chief restores the newest
# checkpoint and broadcasts it to the other replica. The final parameters'
# SHA-256 (kiln-train inspect) must equal the reference's. A checkpoint
# written by 2 replicas is refused by 1 replica (another summation order:
# not a bit-exact continuation).
# Usage: test_train_dist_resume.sh KILN_TRAIN  (env KILN_TEST_SANITIZED=1: smaller)
set -u
KT=${1:?usage: test_train_dist_resume.sh path/to/kiln-train}
TMP=$(mktemp -d)
LP=""
# the whole group at once: the launcher and its replicas (which would also
# die with the launcher: they ask for SIGKILL when their parent goes)
killgroup() { kill -KILL "$1" $(ps -o pid= --ppid "$1") 2> /dev/null; }
trap '[ -n "$LP" ] && killgroup "$LP"; rm -rf "$TMP"' EXIT
unset TF_CONFIG KILN_COLL_KEY
fail() { echo "FAIL: $*"; exit 1; }

N=8000; EPOCHS=2; KILLS=8
if [ "${KILN_TEST_SANITIZED:-0}" = 1 ]; then N=2000; EPOCHS=2; KILLS=4; fi
# the reference and the killed runs unsharded; the sharded optimizer (the
# default) has its own killed run below, which must end on the same bytes
ARGS="--model=mlp --train_epochs=$EPOCHS --train_examples=$N --batch_size=64 --world_size=2 \
      --shard_optimizer=0 --checkpoint_steps=7 --keep_checkpoints=3 --threads=1 --seed=13 --log_format=json"

sha() { "$KT" inspect "$1" | sed -n 's/.*"sha256":"\([0-9a-f]*\)".*/\1/p'; }

START=$(date +%s%N)
# shellcheck disable=SC2086
"$KT" mnist $ARGS --model_dir="$TMP/ref" > "$TMP/ref.log" 2>&1 || fail "reference run: $(tail -3 "$TMP/ref.log")"
DUR_MS=$(( ($(date +%s%N) - START) / 1000000 ))
[ "$DUR_MS" -gt 50 ] || DUR_MS=50
REF=$(sha "$TMP/ref")
[ -n "$REF" ] || fail "no sha256 from the reference checkpoint"
tail -1 "$TMP/ref.log" | grep -q '"event":"done".*"replicas":2' || fail "reference run did not end with done"

seed=4242
# sets R (not echoed: a $(...) subshell would lose the seed's update)
rand() { seed=$(( (seed * 1103515245 + 12345) % 2147483648 )); R=$(( seed % $1 )); }

i=0; finished=0; restored=0
while [ $i -lt 100 ]; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    "$KT" mnist $ARGS --model_dir="$TMP/run" >> "$TMP/run.log" 2>&1 &
    LP=$!
    if [ $i -le "$KILLS" ]; then
        rand $((DUR_MS / 2)); ms=$(( R + 400 ))
        if [ $i = 1 ]; then
            # the first kill lands after the first checkpoint, so that at
            # least one restart restores (and broadcasts) a mid-run state
            w=0
            while ! ls "$TMP/run"/ckpt-*.kiln > /dev/null 2>&1 && [ $w -lt 600 ]; do
                sleep 0.05; w=$((w + 1)); done
            rand 200; ms=$R
        fi
        sleep "$(awk "BEGIN{print $ms/1000}")"
        killgroup "$LP"
        wait "$LP" 2> /dev/null; rc=$?
        LP=""
        if [ $rc = 0 ]; then finished=1; break; fi
    else
        wait "$LP"; rc=$?
        LP=""
        [ $rc = 0 ] || fail "final run exited $rc: $(tail -3 "$TMP/run.log")"
        finished=1
        break
    fi
done
[ $finished = 1 ] || fail "the killed run never finished"
restored=$(grep -c '"event":"restored"' "$TMP/run.log")
GOT=$(sha "$TMP/run")
echo "runs: $i, restores: $restored"
echo "reference sha256 $REF"
echo "resumed   sha256 $GOT"
[ "$REF" = "$GOT" ] || fail "parameters differ after kill-and-resume of 2 replicas"
[ "$restored" -ge 1 ] || fail "no restart restored a checkpoint"

# the sharded optimizer: killed once after its first checkpoint, resumed,
# and the final checkpoint (parameters and optimizer state) byte for byte
# the unsharded reference's
# shellcheck disable=SC2086
"$KT" mnist $ARGS --shard_optimizer=1 --model_dir="$TMP/zero" >> "$TMP/zero.log" 2>&1 &
LP=$!
w=0
while ! ls "$TMP/zero"/ckpt-*.kiln > /dev/null 2>&1 && [ $w -lt 600 ]; do
    sleep 0.05; w=$((w + 1)); done
killgroup "$LP"
wait "$LP" 2> /dev/null
LP=""
# shellcheck disable=SC2086
"$KT" mnist $ARGS --shard_optimizer=1 --model_dir="$TMP/zero" >> "$TMP/zero.log" 2>&1 ||
    fail "sharded resumed run: $(tail -3 "$TMP/zero.log")"
newest() { ls "$1"/ckpt-*.kiln | sort | tail -1; }
echo "sharded: $(grep -c '"event":"restored"' "$TMP/zero.log") restore(s); $(newest "$TMP/zero")"
[ "$(basename "$(newest "$TMP/zero")")" = "$(basename "$(newest "$TMP/ref")")" ] ||
    fail "sharded run ended at another step: $(newest "$TMP/zero") vs $(newest "$TMP/ref")"
cmp "$(newest "$TMP/zero")" "$(newest "$TMP/ref")" ||
    fail "the sharded run's final checkpoint differs from the unsharded reference's"

# a 2-replica checkpoint is not resumed by 1 replica
# shellcheck disable=SC2086
"$KT" mnist --model=mlp --train_epochs=$((EPOCHS + 1)) --train_examples=$N --batch_size=64 \
    --threads=1 --seed=13 --model_dir="$TMP/ref" > /dev/null 2> "$TMP/one.err"
rc=$?
[ $rc != 0 ] && grep -q "replicas=2" "$TMP/one.err" || fail "1 replica resumed a 2-replica checkpoint (rc $rc)"
echo "5 passed, 0 failed"

#!/bin/sh
# tests/runtime/test_train_resume.sh - kill-and-resume is bit-exact.
#
# A reference run trains without interruption. A second run in another model
# dir is SIGKILLed at random moments and restarted until it finishes; once it
# also gets a SIGTERM (must exit 143 after writing a checkpoint) and once its
# newest checkpoint is truncated (must fall back to the one before). The
# final parameters' SHA-256 (kiln-train inspect) must equal the reference's.
# Usage: test_train_resume.sh KILN_TRAIN  (env KILN_TEST_SANITIZED=1: smaller;
# RESUME_MODEL=cnn, RESUME_N, RESUME_EPOCHS, RESUME_KILLS: test_train_resume_cnn.sh;
# RESUME_EXTRA: more kiln-train flags)
set -u
KT=${1:?usage: test_train_resume.sh path/to/kiln-train}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

N=8000; EPOCHS=3; KILLS=12
if [ "${KILN_TEST_SANITIZED:-0}" = 1 ]; then N=1500; EPOCHS=2; KILLS=6; fi
MODEL=${RESUME_MODEL:-mlp}; N=${RESUME_N:-$N}; EPOCHS=${RESUME_EPOCHS:-$EPOCHS}
KILLS=${RESUME_KILLS:-$KILLS}
# RESUME_EXTRA: more flags (scripts/gpu/device-checks: --device=/gpu:0 --data_dir=...)
ARGS="--model=$MODEL --train_epochs=$EPOCHS --train_examples=$N --batch_size=64 \
      --checkpoint_steps=5 --keep_checkpoints=3 --threads=2 --seed=11 --log_format=json \
      ${RESUME_EXTRA:-}"

sha() { "$KT" inspect "$1" | sed -n 's/.*"sha256":"\([0-9a-f]*\)".*/\1/p'; }

# shellcheck disable=SC2086
"$KT" mnist $ARGS --model_dir="$TMP/ref" > "$TMP/ref.log" 2>&1 || fail "reference run: $(tail -3 "$TMP/ref.log")"
REF=$(sha "$TMP/ref")
[ -n "$REF" ] || fail "no sha256 from the reference checkpoint"
tail -1 "$TMP/ref.log" | grep -q '"event":"done"' || fail "reference run did not end with done"

# time of one whole run, to spread the kills over it
START=$(date +%s%N)
# shellcheck disable=SC2086
"$KT" mnist $ARGS --model_dir="$TMP/timing" > /dev/null 2>&1
DUR_MS=$(( ($(date +%s%N) - START) / 1000000 ))
[ "$DUR_MS" -gt 50 ] || DUR_MS=50

# kill times from an LCG; KILN_TEST_SEED varies them (printed, so a failure
# can be replayed). rand sets R in this shell: $(rand) would run in a
# subshell and never advance the seed, putting every kill at the same moment.
seed=${KILN_TEST_SEED:-12345}
echo "kill-time seed $seed (KILN_TEST_SEED)"
rand() { seed=$(( (seed * 1103515245 + 12345) % 2147483648 )); R=$(( seed % $1 )); }

i=0; finished=0; termed=0; truncated=0
while [ $i -lt 200 ]; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    "$KT" mnist $ARGS --model_dir="$TMP/run" >> "$TMP/run.log" 2>&1 &
    pid=$!
    if [ $i -le "$KILLS" ]; then
        rand $((DUR_MS / 3))
        ms=$(( R + 20 ))
        # the second start gets a SIGTERM once it is past loading the data
        [ $i = 2 ] && ms=$(( DUR_MS / 2 ))
        sleep "$(awk "BEGIN{print $ms/1000}")"
        if [ $i = 2 ]; then
            kill -TERM $pid 2>/dev/null
            wait $pid; rc=$?
            if [ $rc = 0 ]; then finished=1; break; fi
            [ $rc = 143 ] || fail "SIGTERM: exit $rc, want 143"
            termed=1
            continue
        fi
        kill -KILL $pid 2>/dev/null
        wait $pid 2>/dev/null; rc=$?
        if [ $rc = 0 ]; then finished=1; break; fi
        # once: tear the newest checkpoint as if the disk lost its tail
        if [ $truncated = 0 ] && [ $i -ge 3 ]; then
            newest=$(ls "$TMP/run"/ckpt-*.kiln 2>/dev/null | sort | tail -1)
            if [ -n "$newest" ] && [ "$(ls "$TMP/run"/ckpt-*.kiln | wc -l)" -ge 2 ]; then
                size=$(stat -c %s "$newest")
                truncate -s $((size / 2)) "$newest"
                truncated=1
            fi
        fi
    else
        wait $pid; rc=$?
        [ $rc = 0 ] || fail "final run exited $rc: $(tail -3 "$TMP/run.log")"
        finished=1
        break
    fi
done
[ $finished = 1 ] || fail "the killed run never finished"
GOT=$(sha "$TMP/run")
echo "runs: $i, SIGTERM tested: $termed, truncated newest: $truncated"
echo "reference sha256 $REF"
echo "resumed   sha256 $GOT"
[ "$REF" = "$GOT" ] || fail "parameters differ after kill-and-resume"
[ $termed = 1 ] || echo "note: the SIGTERM landed after the run had finished"
echo "1 passed, 0 failed"

#!/bin/sh
# tests/runtime/test_train_dist.sh - kiln-train's data-parallel strategies,
# local (--world_size) mode:
#  - 2 replicas finish with the identity check after every step on, write a
#    checkpoint (chief only) and end with a done event for 2 replicas;
#  - the same with the optimizer sharded (--shard_optimizer, ZeRO-1): the
#    identity check after every step passes, and the epoch-end checkpoint
#    (parameters and the gathered optimizer state) is byte for byte the
#    unsharded run's: the same additions in the same order; SIGTERM to one
#    replica stops both (143, checkpoint at the stop step);
#  - the identity check fails loudly, naming the rank, when a test hook
#    nudges one replica's parameter;
#  - convergence: after 1 epoch on a subset, 2 replicas (global batch 64 =
#    2 x 32) reach the 1-replica test accuracy within 0.01 (the same global
#    batches and the same averaged gradient; only float summation order
#    differs, measured |diff| ~ 0.001);
#  - SIGTERM to ONE replica stops both after the same step, exit 143, and the
#    chief's checkpoint is at that step; SIGTERM to the launcher does too;
#  - a SIGKILLed replica makes the launcher stop the other and exit non-zero
#    naming the replica, within a bounded time;
#  - bad input: batch not divisible, bad TF_CONFIG, one_device with 2
#    replicas, --world_size with a TF_CONFIG cluster, parameter_server not
#    built in: a clear message and exit 2.
# Usage: test_train_dist.sh KILN_TRAIN  (env KILN_TEST_SANITIZED=1: smaller)
set -u
KT=${1:?usage: test_train_dist.sh path/to/kiln-train}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset TF_CONFIG KILN_COLL_KEY
pass=0 failed=0
ok() { if eval "$2"; then pass=$((pass + 1)); else failed=$((failed + 1)); echo "FAIL: $1"; fi; }

N=4000; LONG=12000
if [ "${KILN_TEST_SANITIZED:-0}" = 1 ]; then N=1000; LONG=4000; fi
ARGS="--model=mlp --train_examples=$N --train_epochs=1 --batch_size=64 --seed=3 --log_format=json"

# 2 replicas, identity check every step; unsharded (the optimizer is sharded
# by default where it can be), the reference for the sharded run below
# shellcheck disable=SC2086
"$KT" mnist $ARGS --world_size=2 --check_replicas_identical --shard_optimizer=0 \
    --model_dir="$TMP/two" \
    > "$TMP/two.log" 2> "$TMP/two.err"
rc=$?
ok "2 replicas exit 0 (got $rc: $(tail -2 "$TMP/two.err"))" '[ $rc = 0 ]'
ok "done event for 2 replicas" 'tail -1 "$TMP/two.log" | grep -q "\"event\":\"done\".*\"replicas\":2"'
ok "one start line: rank 0's output only" '[ "$(grep -c "\"event\":\"start\"" "$TMP/two.log")" = 1 ]'
SPE=$(( (N + 63) / 64 ))
ok "checkpoint at the epoch end (step $SPE)" '[ -f "$TMP/two/$(printf "ckpt-%012d.kiln" $SPE)" ]'
ok "TensorBoard events" 'ls "$TMP/two/eval"/events.out.tfevents.* > /dev/null 2>&1'

# the sharded optimizer: identical replicas, and the unsharded run's checkpoint
# shellcheck disable=SC2086
"$KT" mnist $ARGS --world_size=2 --check_replicas_identical --shard_optimizer \
    --model_dir="$TMP/zero" > "$TMP/zero.log" 2> "$TMP/zero.err"
rc=$?
ok "sharded: 2 replicas exit 0, identical after every step (got $rc: $(tail -2 "$TMP/zero.err"))" '[ $rc = 0 ]'
CK=$(printf "ckpt-%012d.kiln" $SPE)
ok "sharded: the checkpoint equals the unsharded run's byte for byte" \
    'cmp "$TMP/zero/$CK" "$TMP/two/$CK"'

# the check can fail: a nudged parameter on rank 1 after step 3
# shellcheck disable=SC2086
KILN_TRAIN_TEST_DIVERGE=1:3 "$KT" mnist $ARGS --world_size=2 --check_replicas_identical=3 \
    > /dev/null 2> "$TMP/div.err"
rc=$?
ok "divergence fails the run (got $rc)" '[ $rc != 0 ]'
ok "divergence names rank 1 and the step" 'grep -q "diverged after step 3: rank 1" "$TMP/div.err"'

# convergence vs one replica at the same global batch
acc() { sed -n 's/.*"event":"done","test_accuracy":\([0-9.]*\).*/\1/p' "$1"; }
# shellcheck disable=SC2086
"$KT" mnist $ARGS --threads=1 > "$TMP/one.log" 2>&1
A1=$(acc "$TMP/one.log"); A2=$(acc "$TMP/two.log")
echo "test accuracy after 1 epoch of $N examples: 1 replica $A1, 2 replicas $A2"
ok "accuracies present" '[ -n "$A1" ] && [ -n "$A2" ]'
ok "2-replica accuracy within 0.01 of 1 replica" \
    'awk "BEGIN{d=$A1-$A2; if (d<0) d=-d; exit !(d <= 0.01 && $A2 > 0.6)}"'

# SIGTERM to one replica (rank 1): both stop after the same step, exit 143
children() { ps -o pid= --ppid "$1" | sort -n; }
wait_children() { # until the launcher has forked 2 replicas that loaded their data
    i=0; while [ $i -lt 100 ]; do
        [ "$(children "$1" | wc -l)" = 2 ] && grep -q '"event":"start"' "$2" 2>/dev/null && return 0
        sleep 0.1; i=$((i + 1)); done; return 1; }
# term_replica NAME [FLAG...]: a long run of 2 replicas (FLAGs added) into
# $TMP/NAME, .log and .err; SIGTERM to replica 1 once both have started.
# Sets rc, the launcher's exit status, and step, the chief's terminated step.
term_replica() {
    name=$1; shift
    # shellcheck disable=SC2086
    "$KT" mnist $ARGS --train_examples=$LONG --train_epochs=50 --world_size=2 "$@" \
        --model_dir="$TMP/$name" > "$TMP/$name.log" 2> "$TMP/$name.err" &
    lp=$!
    wait_children $lp "$TMP/$name.log"; sleep 0.5
    r1=$(children $lp | tail -1)
    kill -TERM "$r1"
    wait $lp; rc=$?
    step=$(sed -n 's/.*"event":"terminated","step":\([0-9]*\).*/\1/p' "$TMP/$name.log")
}
term_replica term --shard_optimizer=0; tstep=$step
ok "SIGTERM to replica 1: exit 143 (got $rc: $(tail -2 "$TMP/term.err"))" '[ $rc = 143 ]'
ok "the chief reports the stop step" '[ -n "$tstep" ] && [ "$tstep" -gt 0 ]'
ok "the chief's checkpoint is at that step" \
    '[ -f "$TMP/term/$(printf "ckpt-%012d.kiln" "${tstep:-0}")" ]'

# the same with the optimizer sharded (the default): the stop flag travels in
# the parameter all-gather instead of the last bucket's sum
term_replica zterm; zstep=$step
ok "sharded: SIGTERM to replica 1: exit 143 (got $rc: $(tail -2 "$TMP/zterm.err"))" '[ $rc = 143 ]'
ok "sharded: the chief's checkpoint is at the stop step" \
    '[ -n "$zstep" ] && [ -f "$TMP/zterm/$(printf "ckpt-%012d.kiln" "${zstep:-0}")" ]'

# SIGTERM to the launcher is forwarded
# shellcheck disable=SC2086
"$KT" mnist $ARGS --train_examples=$LONG --train_epochs=50 --world_size=2 \
    --model_dir="$TMP/term2" > "$TMP/term2.log" 2>&1 &
lp=$!
wait_children $lp "$TMP/term2.log"; sleep 0.3
kill -TERM $lp
wait $lp; rc=$?
ok "SIGTERM to the launcher: exit 143 (got $rc)" '[ $rc = 143 ]'
ok "checkpoint written on SIGTERM" 'ls "$TMP/term2"/ckpt-*.kiln > /dev/null 2>&1'

# a replica killed: the launcher stops the other and names it, fast
# shellcheck disable=SC2086
"$KT" mnist $ARGS --train_examples=$LONG --train_epochs=50 --world_size=2 \
    > "$TMP/kill.log" 2> "$TMP/kill.err" &
lp=$!
wait_children $lp "$TMP/kill.log"; sleep 0.3
t0=$(date +%s)
kill -KILL "$(children $lp | tail -1)"
wait $lp; rc=$?
dt=$(( $(date +%s) - t0 ))
ok "killed replica: non-zero exit (got $rc)" '[ $rc != 0 ] && [ $rc != 143 ]'
ok "the launcher names replica 1 ($(cat "$TMP/kill.err"))" \
    'grep -q "replica 1 of 2 was killed by signal 9" "$TMP/kill.err"'
ok "within 15 s (took $dt s)" '[ $dt -le 15 ]'

# mirrored on this CPU-only build: one replica on the CPU
# shellcheck disable=SC2086
"$KT" mnist $ARGS --train_examples=500 --distribution_strategy=mirrored > "$TMP/mir.log" 2>&1
rc=$?
ok "mirrored: one replica, exit 0 (got $rc)" \
    '[ $rc = 0 ] && grep -q "\"strategy\":\"mirrored\",\"replicas\":1" "$TMP/mir.log"'

# bad input: clear messages, exit 2
# shellcheck disable=SC2086
"$KT" mnist $ARGS --world_size=3 > /dev/null 2> "$TMP/e1"; rc=$?
ok "batch 64 over 3 replicas refused (got $rc)" '[ $rc = 2 ] && grep -q "split evenly over the 3 replicas" "$TMP/e1"'
TF_CONFIG='{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 7}}' \
    "$KT" mnist $ARGS > /dev/null 2> "$TMP/e2"; rc=$?
ok "bad TF_CONFIG refused (got $rc: $(cat "$TMP/e2"))" '[ $rc = 2 ] && grep -q "TF_CONFIG" "$TMP/e2"'
TF_CONFIG='{"cluster": ' "$KT" mnist $ARGS > /dev/null 2> "$TMP/e3"; rc=$?
ok "TF_CONFIG that is not JSON refused" '[ $rc = 2 ] && grep -q "TF_CONFIG" "$TMP/e3"'
# shellcheck disable=SC2086
"$KT" mnist $ARGS --distribution_strategy=one_device --world_size=2 > /dev/null 2> "$TMP/e4"
rc=$?
ok "one_device with 2 replicas refused" '[ $rc = 2 ] && grep -q "multi_worker_mirrored" "$TMP/e4"'
TF_CONFIG='{"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]}, "task": {"type": "chief", "index": 0}}' \
    "$KT" mnist $ARGS --world_size=2 > /dev/null 2> "$TMP/e5"; rc=$?
ok "--world_size with a TF_CONFIG cluster refused" '[ $rc = 2 ] && grep -q "one or the other" "$TMP/e5"'
# shellcheck disable=SC2086
"$KT" mnist $ARGS --distribution_strategy=parameter_server > /dev/null 2> "$TMP/e6"; rc=$?
if grep -q "not built in" "$TMP/e6"; then
    ok "parameter_server hook default: exit 2" '[ $rc = 2 ]'
fi
# the optimizer is sharded over at most 8 replicas: asked for by name beyond
# that, it is an error; by default, 9 replicas train unsharded
# shellcheck disable=SC2086
"$KT" mnist $ARGS --train_examples=720 --batch_size=72 --world_size=9 --shard_optimizer \
    > /dev/null 2> "$TMP/e8"; rc=$?
ok "--shard_optimizer over 9 replicas refused (got $rc: $(head -1 "$TMP/e8"))" \
    '[ $rc != 0 ] && grep -q "shard_optimizer: the optimizer can be sharded only" "$TMP/e8"'
# shellcheck disable=SC2086
KILN_DIST_PROFILE=1 "$KT" mnist $ARGS --train_examples=720 --batch_size=72 --world_size=9 \
    > "$TMP/nine.log" 2> "$TMP/e9"; rc=$?
ok "9 replicas, optimizer not named: unsharded, exit 0 (got $rc: $(head -1 "$TMP/e9"))" \
    '[ $rc = 0 ] && tail -1 "$TMP/nine.log" | grep -q "\"replicas\":9" &&
     grep -q "bucket(s):" "$TMP/e9" && ! grep -q "sharded optimizer" "$TMP/e9"'
# the all-reduce's own flags choose the unsharded step; with --shard_optimizer
# they are a contradiction
# shellcheck disable=SC2086
"$KT" mnist $ARGS --world_size=2 --allreduce=inline --shard_optimizer > /dev/null \
    2> "$TMP/e10"; rc=$?
ok "--allreduce with --shard_optimizer refused (got $rc)" \
    '[ $rc = 2 ] && grep -q "allreduce=inline tunes the all-reduce" "$TMP/e10"'
# shellcheck disable=SC2086
KILN_DIST_PROFILE=1 "$KT" mnist $ARGS --world_size=2 --bucket_bytes=4096 > /dev/null \
    2> "$TMP/e11"; rc=$?
ok "--bucket_bytes alone: the unsharded all-reduce, in buckets (got $rc)" \
    '[ $rc = 0 ] && grep -q "bucket(s):" "$TMP/e11" && ! grep -q "sharded optimizer" "$TMP/e11"'
# shellcheck disable=SC2086
KILN_DIST_PROFILE=1 "$KT" mnist $ARGS --world_size=2 > /dev/null 2> "$TMP/e12"; rc=$?
ok "no flag: the optimizer sharded (got $rc)" \
    '[ $rc = 0 ] && grep -q "sharded optimizer" "$TMP/e12"'
# the measuring modes. nocomm: the gradient-sync step with nothing summed,
# unsharded (the sharded step cannot skip its exchange), so the replicas
# train apart from the first step on
# shellcheck disable=SC2086
KILN_DIST_PROFILE=nocomm "$KT" mnist $ARGS --world_size=2 --check_replicas_identical \
    > /dev/null 2> "$TMP/nocomm.err"; rc=$?
ok "KILN_DIST_PROFILE=nocomm: unsharded, the replicas diverge (got $rc: $(grep -m1 diverged "$TMP/nocomm.err"))" \
    '[ $rc != 0 ] && grep -q "replicas diverged after step 1" "$TMP/nocomm.err" &&
     ! grep -q "sharded optimizer" "$TMP/nocomm.err"'
# lockstep: each replica runs the single-replica step on all the data (one
# process of the bound) and waits at a barrier after it: the same training as
# one process at the per-replica batch, so the same final test figures
# shellcheck disable=SC2086
KILN_DIST_PROFILE=lockstep "$KT" mnist $ARGS --world_size=2 --check_replicas_identical \
    > "$TMP/lockstep.log" 2> "$TMP/lockstep.err"; rc=$?
# shellcheck disable=SC2086
"$KT" mnist $ARGS --batch_size=32 > "$TMP/half.log" 2> /dev/null
ok "KILN_DIST_PROFILE=lockstep: both replicas in the barrier, trained like 1 replica at batch 32 (got $rc)" \
    '[ $rc = 0 ] && [ "$(grep -c "ms/step in the barrier" "$TMP/lockstep.err")" = 2 ] &&
     [ -n "$(tail -1 "$TMP/half.log" | grep -o "test_loss\":[0-9.]*")" ] &&
     [ "$(tail -1 "$TMP/lockstep.log" | grep -o "test_loss\":[0-9.]*")" = \
       "$(tail -1 "$TMP/half.log" | grep -o "test_loss\":[0-9.]*")" ]'
# a measuring mode exchanges nothing: the flags that tune the exchange are
# refused, not accepted and ignored (=0, what runs anyway, is fine above)
for f in --shard_optimizer --allreduce=inline; do
    # shellcheck disable=SC2086
    KILN_DIST_PROFILE=nocomm "$KT" mnist $ARGS --world_size=2 $f > /dev/null 2> "$TMP/idle.err"
    rc=$?
    ok "KILN_DIST_PROFILE=nocomm with $f refused (got $rc: $(head -1 "$TMP/idle.err"))" \
        '[ $rc != 0 ] && grep -q -- "$f: KILN_DIST_PROFILE=nocomm measures a step that exchanges nothing" "$TMP/idle.err"'
done
# shellcheck disable=SC2086
"$KT" mnist $ARGS --distribution_strategy=bogus > /dev/null 2> "$TMP/e7"; rc=$?
ok "unknown strategy refused" '[ $rc = 2 ] && grep -q "multi_worker_mirrored or parameter_server" "$TMP/e7"'

echo "$pass passed, $failed failed"
[ $failed = 0 ]

#!/bin/sh
# tests/runtime/test_train_dist_tfconfig.sh - multi_worker_mirrored driven by
# TF_CONFIG, with the processes started here as a platform would:
#  - a chief and a worker (one all-reduce group, rank 0 and 1) and an
#    evaluator (not in the group) share a model dir: chief and worker finish
#    with the same test accuracy; the chief writes the checkpoints, the
#    evaluator evaluates checkpoints into <model_dir>/eval and exits 0 after
#    the final one;
#  - a worker killed mid-run makes the chief fail within a bounded time with
#    a message that names rank 1 and the step;
#  - SIGTERM to the worker: both stop after the same step (exit 143), the
#    chief writes the checkpoint;
#  - a ps task goes to the parameter_server hook.
# Usage: test_train_dist_tfconfig.sh KILN_TRAIN  (env KILN_TEST_SANITIZED=1: smaller)
set -u
KT=${1:?usage: test_train_dist_tfconfig.sh path/to/kiln-train}
TMP=$(mktemp -d)
PIDS=""
cleanup() { for p in $PIDS; do kill -KILL "$p" 2> /dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
pass=0 failed=0
ok() { if eval "$2"; then pass=$((pass + 1)); else failed=$((failed + 1)); echo "FAIL: $1"; fi; }

N=6000; LONG=20000
if [ "${KILN_TEST_SANITIZED:-0}" = 1 ]; then N=1500; LONG=6000; fi
ARGS="--model=mlp --train_examples=$N --train_epochs=2 --batch_size=64 --seed=5 --threads=1 \
      --checkpoint_steps=20 --keep_checkpoints=100 --log_format=json --model_dir=$TMP/m"
CLUSTER='"cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223"]}'
tf() { echo "{$CLUSTER, \"task\": {\"type\": \"$1\", \"index\": $2}, \"environment\": \"cloud\"}"; }
# one key per test run: two runs of this test at once must not meet
export KILN_COLL_KEY="test-tfconfig-$$"

# shellcheck disable=SC2086
TF_CONFIG=$(tf evaluator 0) "$KT" mnist $ARGS > "$TMP/eval.log" 2> "$TMP/eval.err" &
ev=$!; PIDS="$PIDS $ev"
# shellcheck disable=SC2086
TF_CONFIG=$(tf worker 0) "$KT" mnist $ARGS > "$TMP/worker.log" 2> "$TMP/worker.err" &
wk=$!; PIDS="$PIDS $wk"
# shellcheck disable=SC2086
TF_CONFIG=$(tf chief 0) "$KT" mnist $ARGS > "$TMP/chief.log" 2> "$TMP/chief.err"
rc=$?
wait $wk; wrc=$?
ok "chief exits 0 (got $rc: $(tail -2 "$TMP/chief.err"))" '[ $rc = 0 ]'
ok "worker exits 0 (got $wrc: $(tail -2 "$TMP/worker.err"))" '[ $wrc = 0 ]'
ok "chief: rank 0 of 2" 'grep -q "\"replicas\":2,\"rank\":0" "$TMP/chief.log"'
ok "worker: rank 1 of 2" 'grep -q "\"replicas\":2,\"rank\":1" "$TMP/worker.log"'
acc() { sed -n 's/.*"event":"done","test_accuracy":\([0-9.]*\).*/\1/p' "$1"; }
ok "chief and worker end with the same parameters (same accuracy)" \
    '[ -n "$(acc "$TMP/chief.log")" ] && [ "$(acc "$TMP/chief.log")" = "$(acc "$TMP/worker.log")" ]'
# the epoch-end evaluation is split over the two (an MLP: no batch norm), so
# the worker knows the test metrics too, the same as the chief's; and the
# split sums give what one replica gets on the whole set (the done event,
# same parameters after the last epoch): the counts exactly
tmet() { sed -n 's/.*"event":"epoch".*\("test_loss":[^,]*,"test_accuracy":[^,}]*\).*/\1/p' "$1"; }
ok "the worker took part in the epoch evaluation: its test metrics are the chief's" \
    '[ "$(tmet "$TMP/worker.log" | wc -l)" = 2 ] && [ "$(tmet "$TMP/worker.log")" = "$(tmet "$TMP/chief.log")" ]'
eacc() { sed -n 's/.*"event":"epoch","epoch":2,.*"test_accuracy":\([0-9.]*\).*/\1/p' "$1"; }
ok "the split evaluation's accuracy is the whole set's ($(eacc "$TMP/chief.log") vs $(acc "$TMP/chief.log"))" \
    '[ -n "$(eacc "$TMP/chief.log")" ] && [ "$(eacc "$TMP/chief.log")" = "$(acc "$TMP/chief.log")" ]'
ok "only the chief writes checkpoints" \
    '[ "$(grep -c "\"event\":\"checkpoint\"" "$TMP/worker.log")" = 0 ] && ls "$TMP/m"/ckpt-*.kiln > /dev/null'
i=0
while kill -0 $ev 2> /dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
wait $ev; erc=$?
FINAL=$(( (N + 63) / 64 * 2 ))
ok "evaluator exits 0 after the final checkpoint (got $erc: $(tail -2 "$TMP/eval.err"))" '[ $erc = 0 ]'
ok "evaluator evaluated step $FINAL last" \
    'tail -1 "$TMP/eval.log" | grep -q "\"event\":\"eval\",\"step\":$FINAL,"'
ok "evaluator wrote TensorBoard events under eval/" \
    '[ "$(ls "$TMP/m/eval"/events.out.tfevents.* | wc -l)" -ge 2 ]'
ok "evaluator did not join the group" '! grep -q "replica" "$TMP/eval.err"'

# a worker that dies: the chief fails fast, naming the rank and the step
rm -rf "$TMP/m"
ARGS2="--model=mlp --train_examples=$LONG --train_epochs=50 --batch_size=64 --threads=1 --log_format=json"
export KILN_COLL_KEY="test-tfconfig-kill-$$"
# shellcheck disable=SC2086
TF_CONFIG=$(tf chief 0) "$KT" mnist $ARGS2 > "$TMP/c2.log" 2> "$TMP/c2.err" &
ch=$!; PIDS="$PIDS $ch"
# shellcheck disable=SC2086
TF_CONFIG=$(tf worker 0) "$KT" mnist $ARGS2 > "$TMP/w2.log" 2> "$TMP/w2.err" &
wk=$!; PIDS="$PIDS $wk"
i=0
while ! grep -q '"event":"start"' "$TMP/w2.log" 2> /dev/null && [ $i -lt 100 ]; do
    sleep 0.1; i=$((i + 1)); done
sleep 0.5
t0=$(date +%s)
kill -KILL $wk
wait $ch; rc=$?
dt=$(( $(date +%s) - t0 ))
ok "chief fails when the worker dies (got $rc)" '[ $rc != 0 ] && [ $rc != 143 ]'
ok "within 15 s (took $dt s)" '[ $dt -le 15 ]'
ok "the message names rank 1 and the step ($(tail -1 "$TMP/c2.err"))" \
    'grep -q "step [0-9]*: .*rank 1" "$TMP/c2.err"'

# SIGTERM to the worker: both replicas stop after the same step, exit 143,
# and the chief's checkpoint is at that step
rm -rf "$TMP/m3"
export KILN_COLL_KEY="test-tfconfig-term-$$"
# shellcheck disable=SC2086
TF_CONFIG=$(tf chief 0) "$KT" mnist $ARGS2 --model_dir="$TMP/m3" > "$TMP/c3.log" 2> "$TMP/c3.err" &
ch=$!; PIDS="$PIDS $ch"
# shellcheck disable=SC2086
TF_CONFIG=$(tf worker 0) "$KT" mnist $ARGS2 --model_dir="$TMP/m3" > "$TMP/w3.log" 2> "$TMP/w3.err" &
wk=$!; PIDS="$PIDS $wk"
i=0
while ! grep -q '"event":"start"' "$TMP/w3.log" 2> /dev/null && [ $i -lt 100 ]; do
    sleep 0.1; i=$((i + 1)); done
sleep 0.5
kill -TERM $wk
wait $wk; wrc=$?
wait $ch; rc=$?
ok "SIGTERM to the worker: both exit 143 (chief $rc, worker $wrc)" '[ $rc = 143 ] && [ $wrc = 143 ]'
cs=$(sed -n 's/.*"event":"terminated","step":\([0-9]*\).*/\1/p' "$TMP/c3.log")
ws=$(sed -n 's/.*"event":"terminated","step":\([0-9]*\).*/\1/p' "$TMP/w3.log")
ok "both stopped after the same step (chief $cs, worker $ws)" '[ -n "$cs" ] && [ "$cs" = "$ws" ]'
ok "the chief's checkpoint is at that step" '[ -f "$TMP/m3/$(printf "ckpt-%012d.kiln" "${cs:-0}")" ]'
ok "only the chief wrote it" '! grep -q "\"event\":\"checkpoint\"" "$TMP/w3.log"'

# a ps task goes to the parameter_server strategy: the hook's default says it
# is not built in; the real one (tools/ps_*.c) serves its shard until SIGTERM
PORT=$((20000 + $$ % 20000))
# shellcheck disable=SC2086
TF_CONFIG="{\"cluster\": {\"chief\": [\"localhost:1\"], \"ps\": [\"localhost:$PORT\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
    timeout -s TERM 4 "$KT" mnist $ARGS2 > "$TMP/ps.log" 2> "$TMP/ps.err"
rc=$?
if grep -q "not built in" "$TMP/ps.err"; then
    ok "ps task: the hook's default says it is not built in, exit 2" '[ $rc = 2 ]'
else
    ok "ps task: serves its shard until SIGTERM ($(tail -1 "$TMP/ps.err"))" \
        'grep -q "\"event\":\"ps_start\"" "$TMP/ps.log"'
fi

echo "$pass passed, $failed failed"
[ $failed = 0 ]

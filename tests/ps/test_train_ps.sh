#!/bin/sh
# tests/ps/test_train_ps.sh - the parameter_server strategy end to end on
# localhost: 2 ps tasks + chief + 1 worker started from TF_CONFIG, as the
# platform starts them.
#
#  1. the worker is killed with SIGKILL mid-training and restarted: it rejoins
#     (pulls, starts past step 0) and the job finishes above an accuracy bar;
#  2. a ps is killed with SIGKILL and restarted: it restores its shard from the
#     newest checkpoint (the version it reports = that checkpoint's step, and
#     the dedup table saved with it) and
#     the job finishes; a worker of another model is refused with a clear error;
#  3. one replica through one ps trains like a plain single-process run
#     (same data order and update math: test accuracy within 0.01); and run
#     again with the ps dropping the reply to its 7th applied push
#     (KILN_PS_FAULT, a test-only fault): the replica resends, the ps answers
#     without applying it twice (its duplicates counter >= 1), and the final
#     checkpoint's parameters are bit-identical to the run without the fault
#     (one replica, one thread: the run is deterministic);
#  4. bad TF_CONFIGs fail with a message.
# Usage: test_train_ps.sh KILN_TRAIN   (env KILN_TEST_SANITIZED=1: smaller)
set -u
KT=${1:?usage: test_train_ps.sh path/to/kiln-train}
TMP=$(mktemp -d)
PIDS=""
cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$TMP"/*.log; do echo "== $f"; tail -5 "$f"; done
    exit 1
}

N=6000; EPOCHS=3; ACC=0.70; CKPT2=40
if [ "${KILN_TEST_SANITIZED:-0}" = 1 ]; then N=3000; EPOCHS=2; ACC=0.60; CKPT2=16; fi

# four free ports (bound once and released: good enough on a test machine)
PORTS=$(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))') || fail "no free ports"
set -- $PORTS
CL="\"cluster\":{\"chief\":[\"127.0.0.1:$1\"],\"worker\":[\"127.0.0.1:$2\"],\"ps\":[\"127.0.0.1:$3\",\"127.0.0.1:$4\"]}"
tf() { echo "{$CL,\"task\":{\"type\":\"$1\",\"index\":$2},\"environment\":\"cloud\"}"; }

ARGS="--distribution_strategy=parameter_server --model=mlp --train_epochs=$EPOCHS \
      --train_examples=$N --batch_size=64 --threads=1 --log_format=json --checkpoint_steps=10 \
      --max_staleness=50 --ps_timeout=60 --seed=3"

start() { # role index log model_dir [extra args]: runs in the background, sets $! 
    role=$1 idx=$2 log=$3 md=$4
    shift 4
    # shellcheck disable=SC2086
    TF_CONFIG=$(tf "$role" "$idx") "$KT" mnist $ARGS --model_dir="$md" "$@" >> "$TMP/$log" 2>&1 &
}

# waits until file matches pattern (up to $3 s)
wait_for() {
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt $(( $3 * 20 )) ] && return 1
        sleep 0.05
    done
    return 0
}

jnum() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1" | tail -1; }

# ---- 1. a worker dies and rejoins ----
MD=$TMP/md1
start ps 0 ps0.log "$MD"; PS0=$!
start ps 1 ps1.log "$MD"; PS1=$!
PIDS="$PS0 $PS1"
wait_for "$TMP/ps0.log" ps_start 30 && wait_for "$TMP/ps1.log" ps_start 30 || fail "ps tasks did not start"
start chief 0 chief.log "$MD"; CH=$!
start worker 0 worker.log "$MD"; WK=$!
PIDS="$PIDS $CH $WK"
wait_for "$TMP/worker.log" '"event":"step"' 60 || fail "worker made no progress"
kill -9 "$WK"
wait "$WK" 2>/dev/null
grep -q '"event":"done"' "$TMP/worker.log" && fail "worker finished before it could be killed"
start worker 0 worker.log "$MD"; WK=$!
PIDS="$PIDS $WK"
wait "$CH"; rc=$?
[ $rc = 0 ] || fail "chief exited $rc"
wait "$WK" || fail "restarted worker failed"
wait "$PS0" || fail "ps 0 did not exit 0 after the chief's shutdown"
wait "$PS1" || fail "ps 1 did not exit 0"
[ "$(grep -c '"event":"start"' "$TMP/worker.log")" = 2 ] || fail "worker did not start twice"
RESTART=$(grep '"event":"start"' "$TMP/worker.log" | tail -1 | sed -n 's/.*"start_step":\([0-9]*\).*/\1/p')
[ "${RESTART:-0}" -gt 0 ] || fail "the restarted worker began at step ${RESTART:-?}, not where the job was"
grep -q '"event":"done"' "$TMP/worker.log" || fail "restarted worker did not finish"
ACC1=$(jnum "$TMP/chief.log" test_accuracy)
awk "BEGIN{exit !($ACC1 >= $ACC)}" || fail "test accuracy $ACC1 < $ACC"
grep -q '"reason":"shutdown"' "$TMP/ps0.log" || fail "ps 0 was not shut down by the chief"
grep '"event":"done"' "$TMP/chief.log" | grep -q '"staleness_mean"' || fail "no staleness report"
# the chief's checkpoint is the ordinary format, at the final version
V=$(jnum "$TMP/chief.log" version)
"$KT" inspect "$MD" | grep -q "\"step\":$V," || fail "final checkpoint is not at version $V"
echo "1: worker killed and rejoined at step $RESTART; test_accuracy $ACC1"

# ---- 2. a ps dies and restores from the newest checkpoint ----
MD=$TMP/md2
for f in ps0 ps1 chief worker; do mv "$TMP/$f.log" "$TMP/$f.1.txt"; done
start ps 0 ps0.log "$MD"; PS0=$!
start ps 1 ps1.log "$MD"; PS1=$!
PIDS="$PS0 $PS1"
wait_for "$TMP/ps0.log" ps_start 30 && wait_for "$TMP/ps1.log" ps_start 30 || fail "ps tasks did not start"
# a worker of another model is refused, with the reason
TF_CONFIG=$(tf worker 0) "$KT" mnist $ARGS --model=cnn --ps_timeout=10 > "$TMP/foreign.log" 2>&1 &&
    fail "a worker of another model was accepted"
grep -q "refused.*another model" "$TMP/foreign.log" || fail "foreign worker: $(cat "$TMP/foreign.log")"
# checkpoints CKPT2 chief steps apart: far more than the moment between seeing
# one and the kill, so no checkpoint can have pulled ps 1's state before the
# kill and be written after the listing below
start chief 0 chief.log "$MD" --checkpoint_steps=$CKPT2; CH=$!
start worker 0 worker.log "$MD"; WK=$!
PIDS="$PIDS $CH $WK"
wait_for "$TMP/chief.log" '"event":"checkpoint"' 60 || fail "no checkpoint from the chief"
kill -9 "$PS1"
wait "$PS1" 2>/dev/null
grep -q '"event":"done"' "$TMP/chief.log" && fail "training finished before the ps could be killed"
# nothing new can be checkpointed while ps 1 is down (the chief pulls every shard)
NEWEST=$(ls "$MD" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.kiln$/\1/p' | sort -n | tail -1)
start ps 1 ps1.log "$MD"; PS1=$!
PIDS="$PIDS $PS1"
wait "$CH"; rc=$?
[ $rc = 0 ] || fail "chief exited $rc after the ps restart"
wait "$WK" || fail "worker failed after the ps restart"
wait "$PS0" || fail "ps 0 did not exit 0"
wait "$PS1" || fail "restarted ps 1 did not exit 0"
RESTORED=$(grep '"event":"ps_start"' "$TMP/ps1.log" | tail -1)
echo "$RESTORED" | grep -q '"restored":true' || fail "restarted ps did not restore: $RESTORED"
# ... with the dedup table saved with those parameters (the chief had pushed)
echo "$RESTORED" | grep -q '"dedup_workers":[1-9]' || fail "restarted ps restored no dedup table: $RESTORED"
echo "$RESTORED" | grep -q "\"version\":$NEWEST," || fail "restarted ps restored version other than the newest checkpoint's $NEWEST: $RESTORED"
ACC2=$(jnum "$TMP/chief.log" test_accuracy)
awk "BEGIN{exit !($ACC2 >= $ACC - 0.05)}" || fail "test accuracy after a ps restart $ACC2"
echo "2: ps 1 killed, restored version $NEWEST from the newest checkpoint; test_accuracy $ACC2"

# ---- 3. one replica through a ps = a plain run ----
CL1="\"cluster\":{\"chief\":[\"127.0.0.1:$1\"],\"ps\":[\"127.0.0.1:$3\"]}"
ONE="--model=mlp --train_epochs=1 --train_examples=$N --batch_size=64 --threads=1 --seed=5 \
     --log_format=json"
one_ps_run() { # model_dir tag [env assignment for the ps]
    # shellcheck disable=SC2086
    env $3 TF_CONFIG="{$CL1,\"task\":{\"type\":\"ps\",\"index\":0}}" "$KT" mnist \
        --distribution_strategy=parameter_server $ONE --model_dir="$1" > "$TMP/$2_ps.log" 2>&1 &
    P=$!
    PIDS="$PIDS $P"
    # shellcheck disable=SC2086
    TF_CONFIG="{$CL1,\"task\":{\"type\":\"chief\",\"index\":0}}" "$KT" mnist \
        --distribution_strategy=parameter_server $ONE --model_dir="$1" > "$TMP/$2_chief.log" 2>&1 ||
        fail "1-replica chief ($2)"
    wait "$P" || fail "1-replica ps ($2)"
}
one_ps_run "$TMP/md3" one KILN_PS_FAULT=
# shellcheck disable=SC2086
"$KT" mnist $ONE > "$TMP/one_plain.log" 2>&1 || fail "plain run"
A1=$(jnum "$TMP/one_chief.log" test_accuracy)
A2=$(jnum "$TMP/one_plain.log" test_accuracy)
awk "BEGIN{d = $A1 - $A2; if (d < 0) d = -d; exit !(d <= 0.01)}" ||
    fail "1 replica via ps: test accuracy $A1, plain run $A2"
# the same run, the reply to the 7th applied push lost
one_ps_run "$TMP/md3f" fault KILN_PS_FAULT=drop_reply_after_apply:7
grep -q "dropping the reply to push 7 " "$TMP/fault_ps.log" || fail "the fault was not injected"
DUPS=$(jnum "$TMP/fault_ps.log" duplicates)
[ "${DUPS:-0}" -ge 1 ] || fail "the resent push was not seen as a duplicate (duplicates=${DUPS:-?})"
V1=$(jnum "$TMP/one_ps.log" version)
V2=$(jnum "$TMP/fault_ps.log" version)
[ "$V1" = "$V2" ] || fail "with a lost reply the ps applied $V2 updates, without $V1"
H1=$("$KT" inspect "$TMP/md3" | sed -n 's/.*"sha256":"\([0-9a-f]*\)".*/\1/p')
H2=$("$KT" inspect "$TMP/md3f" | sed -n 's/.*"sha256":"\([0-9a-f]*\)".*/\1/p')
[ -n "$H1" ] && [ "$H1" = "$H2" ] || fail "parameters after a lost reply differ: $H2, without the fault $H1"
# a fault this build does not know is refused, not ignored
KILN_PS_FAULT=drop_everything TF_CONFIG="{$CL1,\"task\":{\"type\":\"ps\",\"index\":0}}" \
    "$KT" mnist --distribution_strategy=parameter_server $ONE > "$TMP/badfault.log" 2>&1 &&
    fail "an unknown KILN_PS_FAULT was accepted"
grep -q "not a fault this build knows" "$TMP/badfault.log" || fail "bad fault: $(cat "$TMP/badfault.log")"
# nor is a push number that no run reaches (strtoull reads "-1" as 2^64 - 1)
for bad in drop_reply_after_apply:-1 drop_reply_after_apply:99999999999999999999 drop_reply_after_apply:; do
    KILN_PS_FAULT=$bad TF_CONFIG="{$CL1,\"task\":{\"type\":\"ps\",\"index\":0}}" \
        "$KT" mnist --distribution_strategy=parameter_server $ONE > "$TMP/badfault.log" 2>&1 &&
        fail "KILN_PS_FAULT=$bad was accepted"
    grep -q "not a fault this build knows" "$TMP/badfault.log" || fail "bad fault $bad: $(cat "$TMP/badfault.log")"
done
echo "3: exactly once: a lost reply resent, $DUPS duplicate(s), $V2 updates, params $H2 = fault-free"
echo "3: 1 replica via ps $A1, plain run $A2"

# ---- 4. bad cluster descriptions ----
TF_CONFIG='{"cluster":{"chief":["a:1"]},"task":{"type":"chief","index":0}}' "$KT" mnist $ARGS \
    > "$TMP/bad.log" 2>&1 && fail "no ps tasks was accepted"
grep -q "cluster.ps" "$TMP/bad.log" || fail "no-ps message: $(cat "$TMP/bad.log")"
TF_CONFIG='{"cluster":{"chief":["a:1"],"ps":["a:1","nocolon"]},"task":{"type":"chief","index":0}}' \
    "$KT" mnist $ARGS > "$TMP/bad.log" 2>&1 && fail "a ps address without a port was accepted"
grep -q 'cluster.ps\[1\].*got "nocolon"' "$TMP/bad.log" || fail "bad ps address message: $(cat "$TMP/bad.log")"
TF_CONFIG='{"cluster":' "$KT" mnist $ARGS > "$TMP/bad.log" 2>&1 && fail "broken TF_CONFIG accepted"
grep -q "TF_CONFIG" "$TMP/bad.log" || fail "broken TF_CONFIG message: $(cat "$TMP/bad.log")"
env -u TF_CONFIG -u CLUSTER_SPEC "$KT" mnist $ARGS > "$TMP/bad.log" 2>&1 && fail "no TF_CONFIG accepted"
grep -q "not set" "$TMP/bad.log" || fail "no TF_CONFIG message: $(cat "$TMP/bad.log")"
echo "PASS"

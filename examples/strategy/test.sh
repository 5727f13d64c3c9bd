#!/bin/sh
# examples/strategy on 2 replicas from TF_CONFIG, and on 1 without: the
# replicas print the same parameter hash, and the loss went down.
#   sh test.sh BINARY
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; for f in "$TMP"/*; do echo "--- $f"; cat "$f"; done; exit 1; }
# a group key of this run alone (the shm segment's name)
export KILN_COLL_KEY="example-strategy-$$"
CL='"cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223"]}'
TF_CONFIG="{$CL, \"task\": {\"type\": \"chief\", \"index\": 0}}" "$BIN" > "$TMP/r0" 2> "$TMP/e0" &
p0=$!
TF_CONFIG="{$CL, \"task\": {\"type\": \"worker\", \"index\": 0}}" "$BIN" > "$TMP/r1" 2> "$TMP/e1"
r1=$?
wait $p0
r0=$?
[ $r0 = 0 ] && [ $r1 = 0 ] || fail "replicas exited $r0 and $r1"
grep -q "multi_worker_mirrored rank 0 of 2" "$TMP/r0" || fail "chief is not rank 0 of 2"
grep -q "multi_worker_mirrored rank 1 of 2" "$TMP/r1" || fail "worker is not rank 1 of 2"
h0=$(sed -n 's/.*params \([0-9a-f]*\).*/\1/p' "$TMP/r0")
h1=$(sed -n 's/.*params \([0-9a-f]*\).*/\1/p' "$TMP/r1")
[ -n "$h0" ] && [ "$h0" = "$h1" ] || fail "parameters differ: $h0 vs $h1"
# loss A -> B with B < A (the program also exits 1 otherwise)
awk '{for (i = 1; i < NF; i++) if ($i == "loss") { a = $(i+1); b = $(i+3) }}
     END { exit !(b + 0 < a + 0) }' "$TMP/r0" || fail "loss did not go down"
# the measuring mode KILN_DIST_PROFILE=lockstep (docs/distributed.md): each
# step is the single-replica step on the caller's slice, then a barrier;
# nothing is exchanged, so the replicas end apart (and the program exits 1)
CL='"cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223"]}'
KILN_COLL_KEY="$KILN_COLL_KEY-ls" KILN_DIST_PROFILE=lockstep \
    TF_CONFIG="{$CL, \"task\": {\"type\": \"chief\", \"index\": 0}}" "$BIN" > "$TMP/l0" 2> "$TMP/le0" &
p0=$!
KILN_COLL_KEY="$KILN_COLL_KEY-ls" KILN_DIST_PROFILE=lockstep \
    TF_CONFIG="{$CL, \"task\": {\"type\": \"worker\", \"index\": 0}}" "$BIN" > "$TMP/l1" 2> "$TMP/le1"
wait $p0
grep -q "replicas differ" "$TMP/l0" && grep -q "ms/step in the barrier" "$TMP/le0" &&
    grep -q "ms/step in the barrier" "$TMP/le1" || fail "lockstep: not the step and barrier alone"
# one replica, no TF_CONFIG
env -u TF_CONFIG -u CLUSTER_SPEC "$BIN" > "$TMP/one" 2> "$TMP/eone" || fail "one replica failed"
grep -q "rank 0 of 1" "$TMP/one" || fail "one replica: not rank 0 of 1"
# parameter_server (when kiln is built with ZeroMQ): a ps task, chief and
# worker; the ps serves until the chief ends the job, both losses go down
P=$((20000 + $$ % 20000))
CL="\"cluster\": {\"chief\": [\"localhost:$P\"], \"worker\": [\"localhost:$((P + 1))\"], \"ps\": [\"localhost:$((P + 2))\"]}"
TF_CONFIG="{$CL, \"task\": {\"type\": \"ps\", \"index\": 0}}" timeout 120 "$BIN" > "$TMP/ps" 2> "$TMP/eps" &
pps=$!
TF_CONFIG="{$CL, \"task\": {\"type\": \"worker\", \"index\": 0}}" timeout 120 "$BIN" > "$TMP/pw" 2> "$TMP/epw" &
pw=$!
TF_CONFIG="{$CL, \"task\": {\"type\": \"chief\", \"index\": 0}}" timeout 120 "$BIN" > "$TMP/pc" 2> "$TMP/epc"
rc=$?
wait $pw
rw=$?
wait $pps
rps=$?
if grep -q "not built in" "$TMP/epc"; then
    echo "parameter_server is not built in: its part skipped"
else
    [ $rc = 0 ] && [ $rw = 0 ] && [ $rps = 0 ] || fail "parameter_server: chief $rc, worker $rw, ps $rps"
    grep -q "parameter_server rank 0 of 2" "$TMP/pc" || fail "parameter_server chief"
    grep -q "ps 0 done" "$TMP/ps" || fail "the ps task did not end with the job"
fi
echo "ok: 2 replicas identical ($h0): $(cat "$TMP/r0")"

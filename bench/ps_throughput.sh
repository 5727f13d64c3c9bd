#!/bin/sh
# bench/ps_throughput.sh - training samples/s of the parameter_server strategy
# (1 ps + 2 workers: chief and worker, 1 thread each, all on this machine)
# against one plain replica (kiln-train mnist, 1 thread), alternating in the
# same run, ROUNDS times; best of each and the ratio printed.
#
# Same model (MLP), data, batch 128 per replica, SGD momentum 0.9, lr 0.05.
# The PS figure is the sum of the two workers' own samples/s (each over its
# training loop; they run concurrently), the replica's its samples/s over
# training. On a 2-core machine the ps competes with the workers for the
# cores, so a ratio near 1 is the ceiling here, not 2.
# Usage: bench/ps_throughput.sh   env: BUILD (build), ROUNDS (3), N (20000), DATA_DIR
set -eu
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
N=${N:-20000}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
KT="$BUILD/bin/kiln-train"
num() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" | tail -1; }
best() { awk 'BEGIN{m=0} {if ($1+0 > m) m=$1+0} END{printf "%.1f", m}'; }
COMMON="--model=mlp --data_dir=$DATA_DIR --train_epochs=1 --train_examples=$N --batch_size=128 \
        --threads=1 --learning_rate=0.05 --log_format=json"
PORTS=$(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
set -- $PORTS
CL="\"cluster\":{\"chief\":[\"127.0.0.1:$1\"],\"worker\":[\"127.0.0.1:$2\"],\"ps\":[\"127.0.0.1:$3\"]}"
tf() { echo "{$CL,\"task\":{\"type\":\"$1\",\"index\":0}}"; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "== machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== MLP, $N examples, batch 128 per replica, 1 thread per process, $ROUNDS rounds"
r=0
while [ $r -lt "$ROUNDS" ]; do
    r=$((r + 1))
    # shellcheck disable=SC2086
    "$KT" mnist --device=/cpu:0 $COMMON > "$TMP/one.log" 2>&1
    ONE=$(tail -1 "$TMP/one.log" | num samples_per_sec)
    ONE_ACC=$(tail -1 "$TMP/one.log" | num test_accuracy)
    echo "$ONE" >> "$TMP/one"
    # shellcheck disable=SC2086
    TF_CONFIG=$(tf ps) "$KT" mnist --distribution_strategy=parameter_server $COMMON \
        > "$TMP/ps.log" 2>&1 &
    ps_pid=$!
    # shellcheck disable=SC2086
    TF_CONFIG=$(tf worker) "$KT" mnist --distribution_strategy=parameter_server $COMMON \
        > "$TMP/w.log" 2>&1 &
    w_pid=$!
    # shellcheck disable=SC2086
    TF_CONFIG=$(tf chief) "$KT" mnist --distribution_strategy=parameter_server $COMMON \
        > "$TMP/c.log" 2>&1
    wait $w_pid
    wait $ps_pid
    C=$(grep '"event":"done"' "$TMP/c.log" | num samples_per_sec)
    W=$(grep '"event":"done"' "$TMP/w.log" | num samples_per_sec)
    ST=$(grep '"event":"done"' "$TMP/c.log" | num staleness_mean)
    ACC=$(grep '"event":"done"' "$TMP/c.log" | num test_accuracy)
    SUM=$(awk "BEGIN{printf \"%.1f\", $C + $W}")
    echo "$SUM" >> "$TMP/ps"
    echo "   round $r: 1 replica $ONE (test_accuracy $ONE_ACC)  ps (chief $C + worker $W) $SUM samples/s" \
         "(chief staleness mean $ST, test_accuracy $ACC)"
done
B1=$(best < "$TMP/one")
BP=$(best < "$TMP/ps")
echo "== best: 1 replica $B1 samples/s, parameter_server (1 ps, 2 workers) $BP samples/s"
echo "== ratio ps/1-replica: $(awk "BEGIN{printf \"%.2f\", $BP / $B1}")"

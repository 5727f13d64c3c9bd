#!/usr/bin/env bash
# bench/service_demo.sh - the main job through the service, end to end: start
# kilnd with the embedded default (a temporary data dir, a free loopback
# port), submit the Fashion-MNIST job (kiln.mnist = kiln-train) with a master
# and WORKERS workers, stream its logs, print the final accuracy and
# throughput, stop kilnd. Meant to be called by scripts/demo:
#
#   bench/service_demo.sh BUILD_DIR [EPOCHS] [WORKERS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
epochs=${2:-2}
workers=${3:-1}
bin=$build/bin
kiln=$bin/kiln
"$kiln" jobs --help >/dev/null 2>&1 || kiln=$bin/kiln-svc-cli
[ -x "$bin/kiln-train" ] || { echo "service demo: $bin/kiln-train is not built" >&2; exit 1; }
dir=$(mktemp -d /tmp/kiln-demo.XXXXXX)
kpid=""
cleanup() {
    [ -n "$kpid" ] && kill "$kpid" 2>/dev/null && wait "$kpid" 2>/dev/null
    rm -rf "$dir/var"
}
trap cleanup EXIT

"$bin/kilnd" --listen 127.0.0.1:0 --data-dir "$dir/var" 2>"$dir/kilnd.log" &
kpid=$!
for _ in $(seq 1 100); do [ -s "$dir/var/kilnd.addr" ] && break; sleep 0.05; done
export KILN_ENDPOINT=http://$(cat "$dir/var/kilnd.addr")
echo "== kilnd on $KILN_ENDPOINT (data $dir/var)"
"$kiln" nodes list
echo
echo "== kiln jobs submit training fashion_mnist --module-name kiln.mnist (master + $workers worker(s))"
wargs=()
[ "$workers" -gt 0 ] && wargs=(--scale-tier custom --master-machine-type n1-standard-4
    --worker-machine-type n1-standard-4 --worker-count "$workers")
set +e
"$kiln" jobs submit training fashion_mnist --module-name kiln.mnist "${wargs[@]}" \
    --job-dir "$dir/job" --region us-central1 --stream-logs -- \
    --model=mlp --train_epochs="$epochs" --batch_size=128 | tee "$dir/logs"
rc=${PIPESTATUS[0]}
set -e
echo
"$kiln" jobs describe fashion_mnist --format table
final=$(grep -P '\tmaster-replica-0\tdone:' "$dir/logs" | tail -1 | cut -f4-)
echo "final (master): ${final:-none}"
echo "checkpoints and TensorBoard events in $dir/job"
exit "$rc"

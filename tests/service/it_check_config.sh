#!/bin/bash
# tests/service/it_check_config.sh - kilnd --check-config: a good set-up
# (tokens with a project user, a site catalog, a node config or fake NVML
# GPUs, a queues file, a certificate) passes, exit 0, with a line for each
# thing it found; then each broken set-up, made one at a time, is caught
# (exit 1, a PROBLEM line naming it): the tokens file's mode, a project user
# that does not exist, a catalog, node config and queues file that do not
# load, a certificate that is missing or not the key's, a key others can
# read, a Slurm partition that cannot be reached, an NVML library that
# finds no GPU, a container runtime that is not there, root with no run-as
# rule, and a data dir a project user cannot get through; and several at
# once are all listed. Nothing is started: no store, no data dir, no port.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

E1=editor-p1-0123456789abcdef
printf '%s p1 editor\n' "$E1" >"$T/tokens"
chmod 600 "$T/tokens"
printf 'defaults:\n  minMaxWaitTimeSeconds: 1\n' >"$T/site.yaml"
cat >"$T/nodes.json" <<'JSON'
{"nodes": [{"name": "gpu-a", "address": "127.0.0.1",
            "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}]}
JSON
cp "$SRC/examples/queues/single-clusterqueue.yaml" "$T/queues.yaml"
ROOT_OK=()
[ "$(id -u)" = 0 ] && ROOT_OK=(--allow-root-replicas yes)

# run NAME [kilnd args...]: kilnd --check-config into $T/NAME.out; RC
run() {
    local name=$1
    shift
    "$KILND" --check-config "$@" >"$T/$name.out" 2>&1
    RC=$?
}
# caught NAME PATTERN [args...]: exits 1 with a PROBLEM line matching PATTERN
caught() {
    local name=$1 pat=$2
    shift 2
    run "$name" "$@"
    check_eq "$name: exit status" "$RC" 1
    if grep -E "^PROBLEM" "$T/$name.out" | grep -qE -- "$pat"; then ok; else
        fail "$name: no PROBLEM line matching '$pat':"
        cat "$T/$name.out" >&2
    fi
}

# ---- a good set-up ----
run good --data-dir "$T/d" --tokens "$T/tokens" --catalog "$T/site.yaml" \
    --node-config "$T/nodes.json" --queues "$T/queues.yaml" "${ROOT_OK[@]}"
check_eq "good: exit 0" "$RC" 0
check "good: says no problems" grep -q "no problems" "$T/good.out"
check "good: found the tokens" grep -q "^ok *tokens: $T/tokens: 1 token" "$T/good.out"
check "good: found the catalog" grep -q "^ok *--catalog: $T/site.yaml" "$T/good.out"
check "good: found the nodes" grep -q "^ok *--node-config: .*1 node, 2 GPUs" "$T/good.out"
check "good: found the queues" grep -q "^ok *--queues: .*1 ClusterQueue" "$T/good.out"
check "good: found kiln-monitor" grep -q "^ok *kiln-monitor: $BUILD/bin/kiln-monitor" "$T/good.out"
check "good: no data dir made" test ! -e "$T/d"
[ -s "$T/good.out" ] || fail "good: printed nothing"
grep -q PROBLEM "$T/good.out" && cat "$T/good.out" >&2

# GPUs through (fake) NVML
export KILN_FAKE_NVML_STATE=$T/nvml
printf '0.name=NVIDIA H100 80GB HBM3\n0.uuid=GPU-11111111-0000-4000-8000-000000000000\n' >"$T/nvml"
run gpus --data-dir "$T/d" --nvml-library "$BUILD/lib/libkiln-fake-nvml.so" "${ROOT_OK[@]}"
check_eq "GPUs found: exit 0" "$RC" 0
check "GPUs found: named" grep -q "^ok *GPUs: 1 GPU through" "$T/gpus.out"
rm "$T/nvml"
caught nvml_none "GPUs: no GPUs" --data-dir "$T/d" \
    --nvml-library "$BUILD/lib/libkiln-fake-nvml.so" "${ROOT_OK[@]}"

# ---- each broken set-up ----
chmod 644 "$T/tokens"
caught tokens_mode "tokens: .*accessible by group or others" --data-dir "$T/d" --tokens "$T/tokens" \
    "${ROOT_OK[@]}"
chmod 600 "$T/tokens"
cp "$T/tokens" "$T/tokens.nouser"
printf 'project p1 user no-such-user-kiln\n' >>"$T/tokens.nouser"
caught no_user "project user: .*tokens.nouser:2" --data-dir "$T/d" --tokens "$T/tokens.nouser" \
    "${ROOT_OK[@]}"
check "no_user: the loader's own words" grep -q "no such user 'no-such-user-kiln'" "$T/no_user.out"
printf 'machineTypes: [oops\n' >"$T/bad-catalog.yaml"
caught catalog "--catalog" --data-dir "$T/d" --catalog "$T/bad-catalog.yaml" "${ROOT_OK[@]}"
printf '{"nodes":[{"name":"x","accelerators":[{"type":"NVIDIA_TESLA_V100","count":0}]}]}' \
    >"$T/bad-nodes.json"
caught nodes "--node-config" --data-dir "$T/d" --node-config "$T/bad-nodes.json" "${ROOT_OK[@]}"
printf 'apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {}\n' >"$T/bad-queues.yaml"
caught queues "--queues" --data-dir "$T/d" --queues "$T/bad-queues.yaml" "${ROOT_OK[@]}"
caught runtime "--container-runtime: /no/such/podman" --data-dir "$T/d" \
    --container-runtime /no/such/podman "${ROOT_OK[@]}"
caught monitor "--monitor: /no/such/monitor" --data-dir "$T/d" --monitor /no/such/monitor \
    "${ROOT_OK[@]}"
caught slurm "slurm: partition nopart" --data-dir "$T/d" --executor slurm --slurm-partition nopart \
    "${ROOT_OK[@]}"
if [ "$(id -u)" = 0 ]; then
    caught root "run-as: kilnd runs as root" --data-dir "$T/d"
fi

if command -v openssl >/dev/null; then
    for n in a b; do
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/$n.key" -out "$T/$n.crt" \
            -days 2 -subj "/CN=127.0.0.1" >/dev/null 2>&1
        chmod 600 "$T/$n.key"
    done
    run tls_good --data-dir "$T/d" --tls-cert "$T/a.crt" --tls-key "$T/a.key" "${ROOT_OK[@]}"
    check_eq "TLS pair: exit 0" "$RC" 0
    check "TLS pair: valid until" grep -q "^ok *TLS: .*a pair, valid until" "$T/tls_good.out"
    caught tls_mismatch "TLS: .*a.crt" --data-dir "$T/d" --tls-cert "$T/a.crt" --tls-key "$T/b.key" \
        "${ROOT_OK[@]}"
    caught tls_missing "TLS: .*no-such.crt" --data-dir "$T/d" --tls-cert "$T/no-such.crt" \
        --tls-key "$T/a.key" "${ROOT_OK[@]}"
    chmod 644 "$T/a.key"
    caught tls_keymode "--tls-key: .*readable by group or others" --data-dir "$T/d" \
        --tls-cert "$T/a.crt" --tls-key "$T/a.key" "${ROOT_OK[@]}"
else
    echo "note: no openssl here: the TLS set-ups are not made"
fi

# a project user who cannot get through the data dir's path (root only:
# kilnd switches users only as root)
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -p "$T/locked/data"
    chmod 755 "$T" # mktemp's 0700 would block the user before locked/ does
    chmod 700 "$T/locked"
    cp "$T/tokens" "$T/tokens.nobody"
    printf 'project p1 user nobody\n' >>"$T/tokens.nobody"
    caught perms "permissions: .*user nobody cannot search $T/locked" --data-dir "$T/locked/data" \
        --tokens "$T/tokens.nobody" "${ROOT_OK[@]}"
    chmod 755 "$T/locked"
    run perms_ok --data-dir "$T/locked/data" --tokens "$T/tokens.nobody" "${ROOT_OK[@]}"
    check "perms fixed: the user reaches the jobs" \
        grep -q "^ok *permissions: project p1's user nobody reaches" "$T/perms_ok.out"
    # kiln-train is the build tree's: a checkout where nobody cannot go (a
    # chroot's /root/kiln) is a real problem of this set-up, and then the
    # only one; elsewhere the set-up is clean
    if setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$(dirname "$KILND")/kiln-train"; then
        check_eq "perms fixed: exit 0" "$RC" 0
    else
        check_eq "perms fixed, the build tree out of nobody's reach: exit 1" "$RC" 1
        check_eq "perms fixed: the one problem left is kiln-train out of nobody's reach" \
            "$(grep '^PROBLEM' "$T/perms_ok.out" | grep -vc "user nobody cannot run .*kiln-train")" 0
    fi
else
    echo "note: not root, or no user nobody: the run-as permission set-up is not made"
fi

# ---- several at once: every one listed, not only the first ----
caught many "--catalog" --data-dir "$T/d" --catalog "$T/bad-catalog.yaml" \
    --node-config "$T/bad-nodes.json" --queues "$T/bad-queues.yaml" --monitor /no/such/monitor \
    "${ROOT_OK[@]}"
check_eq "many: four problems counted" "$(grep -c '^PROBLEM' "$T/many.out" | tr -d ' ')" \
    "$(grep -cE '^PROBLEM (--catalog|--node-config|--queues|--monitor)' "$T/many.out")"
check "many: the summary counts them" grep -qE "check-config: [4-9][0-9]* problems" "$T/many.out"
for w in --node-config --queues --monitor; do
    check "many: $w listed too" grep -q "^PROBLEM $w" "$T/many.out"
done
check "nothing made the data dir" test ! -e "$T/d"
finish

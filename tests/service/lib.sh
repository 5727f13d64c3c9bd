# tests/service/lib.sh - shared by the service integration tests (it_*.sh).
# Sourced with the build dir as $1. Starts real kilnd processes on free
# loopback ports (--listen 127.0.0.1:0), talks to 127.0.0.1 only, bounds
# every wait, and kills what it started on exit.
set -u

BUILD=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
KILND=$BUILD/bin/kilnd
KILN=$BUILD/bin/kiln
# `kiln` dispatches the service verbs once src/cli/cli_main.c knows them; until
# then the tests use the same code through kiln-svc-cli.
if ! "$KILN" jobs --help >/dev/null 2>&1; then KILN=$BUILD/bin/kiln-svc-cli; fi
PY=${PYTHON:-python3}
for tool in curl "$PY"; do
    if ! command -v "$tool" >/dev/null; then
        echo "SKIP: the service integration tests need $tool"
        exit 77
    fi
done
T=$(mktemp -d /tmp/kiln-it.XXXXXX)
# each test script its own replica port range, so that tests running in
# parallel (ctest -j) never hand the same port to two replicas
case $(basename "$0") in
it_api.sh) port_base=21000 ;;
it_auth.sh) port_base=22000 ;;
it_ddp.sh) port_base=23000 ;;
it_fault.sh) port_base=24000 ;;
it_gpu.sh) port_base=25000 ;;
it_lifecycle.sh) port_base=26000 ;;
it_mnist.sh) port_base=27000 ;;
it_restart.sh) port_base=28000 ;;
it_pytorchjob.sh) port_base=30000 ;;
it_gcloud.sh) port_base=31000 ;;
it_storage.sh) port_base=32000 ;;
it_metrics.sh) port_base=33000 ;;
it_dashboard.sh) port_base=34000 ;;
it_tuning.sh) port_base=35000 ;;
it_trust.sh) port_base=36000 ;;
it_container.sh) port_base=37000 ;;
it_adopt.sh) port_base=38000 ;;
it_runas.sh) port_base=39000 ;;
it_fulldisk.sh) port_base=40000 ;;
it_fields.sh) port_base=42000 ;;
it_tuning_tb.sh) port_base=43000 ;;
it_tuning_mnist.sh) port_base=46000 ;;
it_slurm.sh) port_base=44000 ;;
it_badbody.sh) port_base=47000 ;;
it_root.sh) port_base=48000 ;;
it_tuning_adopt.sh) port_base=45000 ;;
it_gpu_nvml.sh) port_base=49000 ;;
it_runtime_version.sh) port_base=56000 ;;
it_slurm_container.sh) port_base=54000 ;;
it_slurm_parity.sh) port_base=55000 ;;
it_kueue.sh) port_base=52000 ;;
it_kueue_fair.sh) port_base=57000 ;;
it_kueue_tuning.sh) port_base=61000 ;;
it_notebooks.sh) port_base=53000 ;;
it_notebooks_browser.sh) port_base=58000 ;;
it_slurm_tuning.sh) port_base=59000 ;;
it_vertex.sh) port_base=50000 ;;
it_vertex_sdk.sh) port_base=51000 ;;
it_elastic_hpa.sh) port_base=62000 ;;
it_elastic_hpa_container.sh) port_base=63000 ;;
it_elastic_hpa_gpu.sh) port_base=60000 ;;
it_slurm_queues.sh) port_base=41000 ;;
it_slurm_elastic.sh) port_base=64000 ;;
it_slurm_steps.sh) port_base=17000 ;;
it_slurm_steps_queues.sh) port_base=18000 ;;
it_slurm_steps_spread.sh) port_base=19000 ;;
it_backup.sh) port_base=20000 ;;
it_upgrade.sh) port_base=16000 ;;
*) port_base=29000 ;;
esac
PORT_RANGE=${PORT_RANGE:-$port_base-$((port_base + 999))}
KPIDS=()
FAILS=0
PASSES=0
export KILN_PROJECT=p1

# kill_monitors DIR: replicas outlive kilnd under their monitors
# (kiln-monitor); stop the monitors and replica groups that run under DIR,
# found by the state files the monitors write (pid + start time).
kill_monitors() {
    local f pid st kind
    for f in "$1"/*/jobs/*/*/replicas/*.state "$1"/jobs/*/*/replicas/*.state; do
        [ -e "$f" ] || continue
        while read -r kind pid st; do
            [ -n "$pid" ] || continue
            [ "$(awk '{sub(/.*\) /, ""); print $20}' "/proc/$pid/stat" 2>/dev/null)" = "$st" ] || continue
            if [ "$kind" = child ]; then kill -9 -- "-$pid" 2>/dev/null; else kill -9 "$pid" 2>/dev/null; fi
        done <"$f"
    done
}

cleanup() {
    for p in "${KPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${KPIDS[@]}"; do wait "$p" 2>/dev/null; done
    kill_monitors "$T"
    eval "${AT_EXIT:-}" # a test's own cleanup (images, users)
    sleep 0.2
    if [ -n "${KEEP:-}" ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT

ok() { PASSES=$((PASSES + 1)); }
fail() {
    FAILS=$((FAILS + 1))
    echo "FAIL: $*" >&2
}
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then ok; else fail "$what"; fi
}
check_eq() { # check_eq DESCRIPTION GOT WANT
    if [ "$2" = "$3" ]; then ok; else fail "$1: got '$2', want '$3'"; fi
}
finish() {
    # stop every kilnd gracefully so that sanitizer reports (leaks included)
    # land in its log, then fail on any
    for p in "${KPIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${KPIDS[@]}"; do
        for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    done
    if grep -lE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$T"/*/kilnd.err 2>/dev/null; then
        fail "sanitizer report from kilnd"
        grep -hE -A12 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$T"/*/kilnd.err | head -60 >&2
    fi
    echo "$PASSES passed, $FAILS failed"
    [ "$FAILS" -eq 0 ]
    exit $?
}

# start_kilnd DATA_DIR [kilnd args...]: sets URL and KPID
start_kilnd() {
    local dir=$1
    shift
    mkdir -p "$dir"
    rm -f "$dir/kilnd.addr"
    # the tests run as root where the CI does: they allow root replicas
    # unless a test names its projects' users itself
    local root_ok=()
    [ "$(id -u)" = 0 ] && [ -z "${NO_ROOT_OK:-}" ] && root_ok=(--allow-root-replicas yes)
    "$KILND" --listen 127.0.0.1:0 --data-dir "$dir" --grace-period 1 \
        --port-range "${PORT_RANGE:-41000-41999}" "${root_ok[@]}" "$@" 2>>"$dir/kilnd.err" &
    KPID=$!
    KPIDS+=("$KPID")
    for _ in $(seq 1 200); do
        [ -s "$dir/kilnd.addr" ] && break
        kill -0 "$KPID" 2>/dev/null || break
        sleep 0.05
    done
    if [ ! -s "$dir/kilnd.addr" ]; then
        echo "kilnd did not start:" >&2
        cat "$dir/kilnd.err" >&2
        exit 1
    fi
    URL=http://$(cat "$dir/kilnd.addr")
    export KILN_ENDPOINT=$URL
}

stop_kilnd() { # graceful
    kill -TERM "$KPID" 2>/dev/null
    wait "$KPID" 2>/dev/null
}

# jget PATH < json: a field by dotted path ("" when absent); lists by index
jget() {
    "$PY" -c '
import json, sys
d = json.load(sys.stdin)
for k in [k for k in sys.argv[1].split(".") if k]:
    if isinstance(d, list):
        d = d[int(k)] if int(k) < len(d) else None
    elif isinstance(d, dict):
        d = d.get(k)
    else:
        d = None
    if d is None:
        break
if d is None:
    print("")
elif isinstance(d, (dict, list)):
    print(json.dumps(d))
elif isinstance(d, bool):
    print("true" if d else "false")
else:
    print(d)' "$1"
}

api() { # api METHOD PATH [BODY] -> body on stdout, status in $STATUS
    local out
    if [ $# -ge 3 ]; then
        out=$(curl -s -m 10 -w '\n%{http_code}' -X "$1" -H 'Content-Type: application/json' \
            ${TOKEN:+-H "Authorization: Bearer $TOKEN"} --data-binary "$3" "$URL$2")
    else
        out=$(curl -s -m 10 -w '\n%{http_code}' -X "$1" \
            ${TOKEN:+-H "Authorization: Bearer $TOKEN"} "$URL$2")
    fi
    STATUS=${out##*$'\n'}
    BODY=${out%$'\n'*}
}

# torchrun_group_why PYTHON: empty where torchrun (PYTHON's torch) can form a
# group of workers in separate allocations here, else why not. Its agent
# hands the others this machine's own name (socket.getfqdn()) as the group's
# master address, as on any cluster; a debootstrap'd chroot has no
# /etc/hosts line for that name, and no group forms there.
torchrun_group_why() {
    if ! "$1" -c 'import torch.distributed.run' 2>/dev/null; then
        echo "$1 has no torch.distributed (python3-torch)"
    elif ! "$1" -c 'import socket; socket.getaddrinfo(socket.getfqdn(), None)' 2>/dev/null; then
        echo "this machine's host name ($(hostname)) does not resolve (getent hosts $(hostname)), and torchrun's agent gives it to the other workers as their master address: add it to /etc/hosts"
    fi
}

job_state() { # job_state JOB [PROJECT]
    api GET "/v1/projects/${2:-p1}/jobs/$1"
    printf '%s' "$BODY" | jget state
}

# wait_state JOB STATE [SECONDS]: polls every 50 ms
wait_state() {
    local i n=$(( ${3:-20} * 20 )) s=""
    for i in $(seq 1 "$n"); do
        s=$(job_state "$1")
        [ "$s" = "$2" ] && return 0
        case "$s" in SUCCEEDED | FAILED | CANCELLED) [ "$s" != "$2" ] && break ;; esac
        sleep 0.05
    done
    echo "  job $1 is '$s', waited for '$2'" >&2
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s\n' "$BODY" | grep -E 'errorMessage|state' >&2
    return 1
}

# wait_file FILE PATTERN [SECONDS]: polls every 50 ms until grep finds
# PATTERN in FILE (which need not exist yet); 1 with a line saying so after
# SECONDS (default 5). For a replica's "up", a log line or a daemon message.
wait_file() {
    local i
    for i in $(seq 1 $(( ${3:-5} * 20 ))); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "  no '$2' in $1 after ${3:-5} s" >&2
    return 1
}

# A Job JSON: job_json ID COMMAND [extra trainingInput JSON members]
job_json() {
    local cmd
    cmd=$(printf '%s' "$2" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c",%s]}%s}}' \
        "$1" "$cmd" "${3:-}"
}

# make_image NAME: a container image from a directory holding busybox
# (busybox-static) and its applets; nothing is pulled. Removed at exit.
make_image() {
    local root=$T/img-$1 a
    mkdir -p "$root/bin" "$root/tmp" "$root/run"
    cp "$(command -v busybox)" "$root/bin/busybox"
    for a in sh cat echo env sleep touch test seq printf kill ls id stat grep tr sed wc true false; do
        ln -sf busybox "$root/bin/$a"
    done
    tar -C "$root" -c . | podman import -q - "localhost/$1" >/dev/null || return 1
    AT_EXIT="${AT_EXIT:-:}; podman rmi -f localhost/$1 >/dev/null 2>&1"
}

# host_image NAME: an image of nothing but the merged-/usr links of Debian
# (bin, lib, lib64, sbin -> usr/...): with the host's /usr and /etc mounted
# read-only (host_runtime_config) its containers run the host's programs,
# Python and torch included, without copying them into an image.
host_image() {
    local root=$T/hostimg-${1//[^A-Za-z0-9]/_} d
    mkdir -p "$root"
    for d in bin lib lib64 sbin; do ln -sfn "usr/$d" "$root/$d"; done
    mkdir -p "$root/tmp" "$root/run" "$root/var/tmp" "$root/root" "$root/home"
    tar -C "$root" -c . | podman import -q - "$1" >/dev/null || return 1
    AT_EXIT="${AT_EXIT:-:}; podman rmi -f $1 >/dev/null 2>&1"
}

# host_runtime_config DIR...: the node config's containerRuntime that mounts
# /usr, /etc and each DIR at the same paths (JSON members, no braces)
host_runtime_config() {
    local args='"--ulimit","nofile=4096:4096","--ulimit","nproc=4096:4096","--network","host","-v","/usr:/usr:ro","-v","/etc:/etc:ro"' d
    for d in "$@"; do args="$args,\"-v\",\"$d:$d\""; done
    printf '"containerRuntime": {"globalArgs": ["--runtime", "runc"], "runArgs": [%s]}' "$args"
}

#!/usr/bin/env bash
# bench/slurm_latency.sh - submit-to-running latency of a job placed through
# Slurm: kiln (POST the job to `kilnd --executor slurm`, until the API says
# RUNNING) against `sbatch` of the same heterogeneous job by hand (until
# `squeue` says R), on the throwaway two-node cluster of the tests
# (tests/service/slurm_cluster.sh). Rounds alternate kiln and sbatch; it
# prints each round, the medians and kiln's median / sbatch's median.
#
#   bench/slurm_latency.sh BUILD_DIR [ROUNDS]     (root; slurm-wlm and munge;
#   kilnd runs with --allow-root-replicas yes, which it needs as root)
#
# The job: a master and 2 workers with 1 GPU (gpu:t4) each, running `sleep
# 2`. Both sides are polled every 20 ms; kilnd itself asks squeue every
# 0.5 s (src/exec/slurm), which is most of what kiln adds.
set -u
BUILD=$(cd "${1:?usage: $0 BUILD_DIR [ROUNDS]}" && pwd)
ROUNDS=${2:-5}
HERE=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d /tmp/kiln-slurm-bench.XXXXXX)
CL=$T/cluster
KPID=
cleanup() {
    [ -n "$KPID" ] && kill "$KPID" 2>/dev/null && wait "$KPID" 2>/dev/null
    "$HERE/tests/service/slurm_cluster.sh" stop "$CL" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
now() { date +%s.%N; }

SPORT=
for base in $(seq 44900 3 44990); do
    [ "$(ss -Htan "( sport >= :$base and sport <= :$((base + 2)) )" | wc -l)" = 0 ] && SPORT=$base && break
done
[ -n "$SPORT" ] || { echo "no free ports for the cluster" >&2; exit 1; }
"$HERE/tests/service/slurm_cluster.sh" start "$CL" "$SPORT" >"$T/cluster.out" 2>&1 || {
    cat "$T/cluster.out" >&2
    exit 1
}
export SLURM_CONF=$CL/slurm.conf

"$BUILD/bin/kilnd" --listen 127.0.0.1:0 --data-dir "$T/d" --executor slurm \
    --slurm-partition kiln --slurm-gpu-type NVIDIA_TESLA_T4=t4 --port-range 47000-47999 \
    --grace-period 1 --allow-root-replicas yes 2>"$T/kilnd.err" &
KPID=$!
for _ in $(seq 1 100); do [ -s "$T/d/kilnd.addr" ] && break; sleep 0.05; done
[ -s "$T/d/kilnd.addr" ] || { echo "kilnd did not start:" >&2; cat "$T/kilnd.err" >&2; exit 1; }
URL=http://$(cat "$T/d/kilnd.addr")

state() { curl -s "$URL/v1/projects/p1/jobs/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("state",""))'; }
kiln_round() { # prints seconds from POST to RUNNING, waits for the end
    local id=$1 t0 t1 s
    local body='{"jobId":"'$id'","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sleep","2"]},"workerType":"n1-standard-4","workerCount":"2","workerConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sleep","2"]}}}'
    t0=$(now)
    curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d "$body" "$URL/v1/projects/p1/jobs"
    for _ in $(seq 1 1500); do
        [ "$(state "$id")" = RUNNING ] && break
        sleep 0.02
    done
    t1=$(now)
    for _ in $(seq 1 600); do
        s=$(state "$id")
        case $s in SUCCEEDED | FAILED | CANCELLED) break ;; esac
        sleep 0.1
    done
    awk "BEGIN{printf \"%.3f\", $t1 - $t0}"
}
sbatch_round() { # the same shape by hand
    local t0 t1 jid
    cat >"$T/job.sh" <<'SB'
#!/bin/bash
#SBATCH --partition=kiln --ntasks=1 --gpus-per-task=t4:1 --output=/dev/null
#SBATCH hetjob
#SBATCH --partition=kiln --ntasks=2 --gpus-per-task=t4:1
srun --het-group=0,1 sleep 2
SB
    t0=$(now)
    jid=$(sbatch --parsable "$T/job.sh" | cut -d';' -f1 | cut -d+ -f1)
    for _ in $(seq 1 1500); do
        squeue -h -j "$jid" -o %t 2>/dev/null | grep -q '^R' && break
        sleep 0.02
    done
    t1=$(now)
    for _ in $(seq 1 600); do
        [ -z "$(squeue -h -j "$jid" -o %t 2>/dev/null)" ] && break
        sleep 0.1
    done
    awk "BEGIN{printf \"%.3f\", $t1 - $t0}"
}

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "# submit -> running through Slurm (2 slurmd, 3 one-GPU tasks): $cpu"
printf '%-6s %10s %10s\n' round kiln_s sbatch_s
K=() S=()
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then
        k=$(kiln_round "lat_$r")
        s=$(sbatch_round)
    else
        s=$(sbatch_round)
        k=$(kiln_round "lat_$r")
    fi
    K+=("$k") S+=("$s")
    printf '%-6s %10s %10s\n' "$r" "$k" "$s"
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mk=$(med "${K[@]}") ms=$(med "${S[@]}")
printf 'median  %10s %10s   kiln/sbatch %.2fx\n' "$mk" "$ms" "$(awk "BEGIN{print $mk/$ms}")"

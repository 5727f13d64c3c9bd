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
# 25 ms for 2 s after a submit, then every
# 0.5 s. Each round submits both sides at the same random fraction of a
# second (at_phase: Slurm's backfill pass starts these jobs once a second).
# KEEP=1 keeps the run's directory (kilnd's job logs, slurmctld's log).
#
# Then the same for two more kinds of kiln job, each against its own
# sbatch by hand (issue 31's figures), both sides until squeue says R:
#   container  the same job with an imageUri (a busybox image imported
#              here), against the hand-made job whose srun runs `podman
#              run` of the same image (kiln's RUNNING would also wait for
#              the containers to start, which squeue's R does not);
#   trial      a tuning job's first trial (1 trial, master only, 1 GPU),
#              against sbatch of one 1-GPU task;
#   program    the plain job until all three replicas' programs run (each
#              touches a file as it starts), against the hand-made job's
#              three srun tasks doing the same: the moment training could
#              begin, on both sides (squeue's R comes before the batch
#              script even starts on its node; kiln's RUNNING under steps
#              comes once the steps are launched).
# kilnd runs each job under its one supervisor (a gang one Slurm
# allocation, each replica a step in it); the yardsticks are the same on
# both sides (the kiln job's allocation in R for container and trial).
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
    [ -n "${IMG:-}" ] && podman rmi -f "$IMG" >/dev/null 2>&1
    [ -n "${KEEP:-}" ] && echo "kept $T" >&2 || rm -rf "$T"
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

# (sed, not a python3 per poll: its start took longer than the squeue poll of
# the hand-made side, a bias against kiln of ~40 ms)
state() { curl -s "$URL/v1/projects/p1/jobs/$1" | sed -n 's/^ *"state": *"\([A-Z_]*\)".*/\1/p' | head -1; }
IMG=localhost/kiln-bench-lat-$$:1
body_of() { # body_of KIND ID
    local img= run='"sleep","2"'
    [ "$1" = container ] && img='"imageUri":"'$IMG'",'
    [ "$1" = program ] && run='"sh","-c","touch '$T'/mark/'$2'.$KILN_TASK_NAME; sleep 2"'
    if [ "$1" = trial ]; then
        printf '%s' '{"jobId":"'$2'","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sleep","2"]},"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":1,"maxParallelTrials":1,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1}]}}}'
        return
    fi
    printf '%s' '{"jobId":"'$2'","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{'"$img"'"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":['"$run"']},"workerType":"n1-standard-4","workerCount":"2","workerConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":['"$run"']}}}'
}
# running KIND ID: a plain job as kiln says it (the API's RUNNING); a
# container job or a trial as Slurm says it (its Slurm job in R), the
# yardstick of the hand-made side
running() {
    case $1 in
    trial) squeue -h -o '%j %t' 2>/dev/null | grep -q "^kiln-p1-$2-t[0-9]* R$" ;;
    container) squeue -h -o '%j %t' 2>/dev/null | grep -q "^kiln-p1-$2 R$" ;;
    program) [ "$(ls "$T/mark" 2>/dev/null | grep -c "^$2\.")" = 3 ] ;;
    *) [ "$(state "$2")" = RUNNING ] ;;
    esac
}
# at_phase P: sleeps until the wall clock's fraction of a second is P.
# Slurm starts these jobs on its backfill pass (bf_interval=1: once a second,
# at the same fraction each time), so a job's latency depends on when in that
# second it was submitted; fixed-length rounds would give one side the same
# bad phase again and again. Each round draws a phase and submits both sides
# at it.
at_phase() {
    local f
    f=$(date +%N)
    sleep "$(awk -v p="$1" -v f="$f" 'BEGIN{d=p-f/1e9; if (d<0) d+=1; printf "%.3f", d}')"
}
kiln_round() { # kiln_round KIND ID: seconds from POST to running, waits for the end
    local kind=$1 id=$2 t0 t1 s
    local body
    body=$(body_of "$kind" "$id")
    at_phase "$PHASE"
    t0=$(now)
    curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d "$body" "$URL/v1/projects/p1/jobs"
    for _ in $(seq 1 1500); do
        running "$kind" "$id" && break
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
sbatch_round() { # sbatch_round KIND: the same shape by hand
    local t0 t1 jid run='sleep 2' m
    [ "$1" = container ] && run="podman run --rm --pull never $IMG sleep 2"
    m=$T/mark/hand-$RANDOM$RANDOM
    [ "$1" = program ] && run="sh -c 'touch $m.\$SLURM_PROCID; sleep 2'"
    if [ "$1" = trial ]; then
        printf '#!/bin/bash\n#SBATCH --partition=kiln --ntasks=1 --gpus-per-task=t4:1 --output=/dev/null\nsrun sleep 2\n' >"$T/job.sh"
    else
        printf '#!/bin/bash\n#SBATCH --partition=kiln --ntasks=1 --gpus-per-task=t4:1 --output=/dev/null\n#SBATCH hetjob\n#SBATCH --partition=kiln --ntasks=2 --gpus-per-task=t4:1\nsrun --het-group=0,1 %s\n' "$run" >"$T/job.sh"
    fi
    at_phase "$PHASE"
    t0=$(now)
    jid=$(sbatch --parsable "$T/job.sh" | cut -d';' -f1 | cut -d+ -f1)
    for _ in $(seq 1 1500); do
        if [ "$1" = program ]; then
            [ "$(ls "$T"/mark/ 2>/dev/null | grep -c "^${m##*/}\.")" = 3 ] && break
        else
            squeue -h -j "$jid" -o %t 2>/dev/null | grep -q '^R' && break
        fi
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
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
KINDS=${KINDS:-plain container trial program}
mkdir -p "$T/mark"
if [[ " $KINDS " = *" container "* ]]; then
    root=$T/img
    mkdir -p "$root/bin" "$root/tmp"
    cp "$(command -v busybox)" "$root/bin/busybox" && ln -sf busybox "$root/bin/sleep" && ln -sf busybox "$root/bin/sh"
    tar -C "$root" -c . | podman import -q - "$IMG" >/dev/null || { echo "cannot import the bench image" >&2; exit 1; }
fi
for kind in $KINDS; do
    case $kind in
    plain) echo "# submit -> running through Slurm, kiln's supervisor (2 slurmd, 3 one-GPU tasks): $cpu" ;;
    container) echo "# the same job in containers (imageUri; by hand: srun podman run), to squeue's R: $cpu" ;;
    trial) echo "# a tuning job's first trial (1 one-GPU task), to squeue's R: $cpu" ;;
    program) echo "# the plain job until its 3 programs run, both sides: $cpu" ;;
    *) echo "unknown kind $kind (plain, container, trial, program)" >&2; exit 2 ;;
    esac
    printf '%-6s %10s %10s\n' round kiln_s sbatch_s
    K=() S=()
    for r in $(seq 1 "$ROUNDS"); do
        PHASE=$(awk -v r=$RANDOM 'BEGIN{printf "%.3f", r/32768}')
        if [ $((r % 2)) = 1 ]; then
            k=$(kiln_round "$kind" "lat_${kind}_$r")
            s=$(sbatch_round "$kind")
        else
            s=$(sbatch_round "$kind")
            k=$(kiln_round "$kind" "lat_${kind}_$r")
        fi
        K+=("$k") S+=("$s")
        printf '%-6s %10s %10s\n' "$r" "$k" "$s"
    done
    mk=$(med "${K[@]}") ms=$(med "${S[@]}")
    printf 'median  %10s %10s   %s kiln/sbatch %.2fx\n' "$mk" "$ms" "$kind" "$(awk "BEGIN{print $mk/$ms}")"
done

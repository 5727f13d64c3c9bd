# tests/service/slurm_lib.sh - sourced after lib.sh by the Slurm tests that
# start their own test cluster (tests/service/slurm_cluster.sh).
#
# slurm_test_cluster FIRST LAST: starts the cluster under $T/slurm with its
# three daemons on three free ports in FIRST..LAST (a developer's cluster
# may hold some; they lie in Linux's ephemeral range, so any socket counts,
# and a port free when looked at can still be taken before slurmctld binds
# it: a start that fails on "Address already in use" tries the next three).
# Sets CLUSTER and SLURM_CONF, stops the cluster at exit; on failure fails
# the test and finishes it.
# slurm_test_cluster FIRST LAST --accounting: the same with Slurm's
# accounting (slurmdbd on a fourth port, its own MariaDB: slurm_cluster.sh).
# slurm_test_cluster FIRST LAST --netns: each node a host of its own (a
# network namespace with its own address and host name on a bridge:
# slurm_cluster.sh); the test needs the netns probe. Options combine.
# KILN_SLURM_NODES=3 in the environment: a third node (n3), on one port more.
slurm_test_cluster() {
    local first=$1 last=$2 base busy started= sport= n=$((1 + ${KILN_SLURM_NODES:-2}))
    shift 2
    local opt=("$@")
    case " ${opt[*]} " in *" --accounting "*) n=$((n + 1)) ;; esac
    CLUSTER=$T/slurm
    AT_EXIT="${AT_EXIT:-:}; $HERE/slurm_cluster.sh stop $CLUSTER"
    for base in $(seq "$first" "$n" "$((last - n + 1))"); do
        busy=$(ss -Htan "( sport >= :$base and sport <= :$((base + n - 1)) )" 2>/dev/null | wc -l)
        [ "$busy" = 0 ] || continue
        sport=$base
        if "$HERE/slurm_cluster.sh" start "$CLUSTER" "$sport" "${opt[@]}" >"$T/cluster.out" 2>&1; then
            started=1
            break
        fi
        grep -qs 'Address already in use' "$CLUSTER"/log/*.log || break
        "$HERE/slurm_cluster.sh" stop "$CLUSTER" >/dev/null 2>&1
        rm -rf "$CLUSTER"
    done
    [ -n "$sport" ] || { fail "no $n free ports in $first-$last for the test cluster"; finish; }
    if [ -z "$started" ]; then
        cat "$T/cluster.out" >&2
        tail -n 20 "$CLUSTER"/log/*.log "$CLUSTER"/munge/munged.log >&2
        fail "the test cluster did not start"
        finish
    fi
    export SLURM_CONF=$CLUSTER/slurm.conf
    slurm_watchdog "$$"
}

# slurm_podman_wrap: $T/podman-wrap, podman through a wrapper that records
# each command line (and the CUDA_VISIBLE_DEVICES it saw) in
# $T/podman-args.log and leaves out --device (the cluster's GPUs are fake:
# no CDI spec on these nodes); give it as kilnd's --container-runtime
slurm_podman_wrap() {
    cat >"$T/podman-wrap" <<EOF
#!/bin/bash
printf '%s CVD=%s\n' "\$*" "\${CUDA_VISIBLE_DEVICES-unset}" >>"$T/podman-args.log"
# an image built of the host's files (lib.sh's host_image) gets the host's
# /usr and /etc read-only, and the test's directories, after "run"
host=
case " \$* " in *" localhost/kiln-test-elastic "*) host=1 ;; esac
args=()
while [ \$# -gt 0 ]; do
    if [ "\$1" = --device ]; then shift 2; continue; fi
    args+=("\$1")
    if [ "\$1" = run ] && [ -n "\$host" ]; then
        args+=(-v /usr:/usr:ro -v /etc:/etc:ro -v "$T:$T" -v "$HERE:$HERE:ro")
        host=
    fi
    shift
done
exec podman "\${args[@]}"
EOF
    chmod 755 "$T/podman-wrap"
}

# slurm_watchdog PID: a test killed outright (ctest's timeout sends SIGKILL,
# so no exit trap runs) would leave its cluster's daemons and its kilnd
# running, and they slow every later test; this stops them once PID is gone
# (slurm_cluster.sh stop: the daemons, and a --netns cluster's namespaces,
# veths and bridge).
# It runs in a session of its own (setsid): ctest's timeout kills the
# test's whole process group, and a watchdog inside it died with the test,
# leaving the cluster running (seen in a chroot: a cluster 50 minutes old).
slurm_watchdog() {
    # shellcheck disable=SC2016 # expanded by the watchdog's own shell
    setsid -f bash -c '
        trap "" HUP
        while kill -0 "$1" 2>/dev/null; do sleep 2; done
        [ -d "$2" ] || exit 0
        pkill -KILL -f -- "--data-dir $3/" 2>/dev/null
        "$4/slurm_cluster.sh" stop "$2" >/dev/null 2>&1' _ "$1" "$CLUSTER" "$T" "$HERE" \
        </dev/null >/dev/null 2>&1
}

# Helpers of the tests that end a job's allocation from outside (endings,
# faults). kst JOB FIELD: kilnStatus.FIELD of project p1's JOB
kst() {
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | jget "kilnStatus.$2"
}
# alloc_of JOB: its running allocation's id
alloc_of() { squeue -h -t running -n "kiln-p1-$1" -o %i | head -1; }
# waiter JOB: a replica that says "up", then waits for $T/go.JOB and ends 0
waiter() { echo "echo up; while [ ! -e $T/go.$1 ]; do sleep 0.1; done; echo done"; }

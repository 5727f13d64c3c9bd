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
# KILN_SLURM_NODES=3 in the environment: a third node (n3), on one port more.
slurm_test_cluster() {
    local first=$1 last=$2 opt=${3:-} base busy started= sport= n=$((1 + ${KILN_SLURM_NODES:-2}))
    [ "$opt" = --accounting ] && n=$((n + 1))
    CLUSTER=$T/slurm
    AT_EXIT="${AT_EXIT:-:}; $HERE/slurm_cluster.sh stop $CLUSTER"
    for base in $(seq "$first" "$n" "$((last - n + 1))"); do
        busy=$(ss -Htan "( sport >= :$base and sport <= :$((base + n - 1)) )" 2>/dev/null | wc -l)
        [ "$busy" = 0 ] || continue
        sport=$base
        if "$HERE/slurm_cluster.sh" start "$CLUSTER" "$sport" $opt >"$T/cluster.out" 2>&1; then
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
# running, and they slow every later test; this stops them once PID is gone.
slurm_watchdog() {
    local pid=$1
    (
        trap '' HUP
        while kill -0 "$pid" 2>/dev/null; do sleep 2; done
        [ -d "$CLUSTER" ] || exit 0
        pkill -KILL -f -- "--data-dir $T/" 2>/dev/null
        "$HERE/slurm_cluster.sh" stop "$CLUSTER" >/dev/null 2>&1
    ) </dev/null >/dev/null 2>&1 &
    disown 2>/dev/null || true
}

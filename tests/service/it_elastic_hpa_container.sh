#!/bin/bash
# tests/service/it_elastic_hpa_container.sh - elasticPolicy.metrics on
# workers that run in containers (src/exec/supervisor/hpa.c, measured from
# each container's cgroup: src/exec/cgroup.c). A workers-only elastic job
# (minReplicas 1, maxReplicas 3; cpu Utilization target 5% of its
# n1-standard-4's 4 vCPUs, and a memory AverageValue far above its use)
# runs its workers in podman, in an image this test builds (busybox, nothing
# pulled). Each worker burns a core in a shell loop for 12 s: those
# processes are the container's, outside its `podman run`'s process group,
# so only the cgroup shows them. The autoscaler scales the job up from its
# one worker, reports the memory it read (the working set), and scales back
# down once they idle (2 s stabilisation); the job SUCCEEDS when worker 0
# exits.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need podman

IMG=kiln-it-hpactr-$$:1
make_image "$IMG" || {
    fail "cannot build the test image"
    finish
}
printf '{"nodes": [{"name": "n1", "address": "127.0.0.1", "cpus": 16, "memoryGb": 64}]}\n' >"$T/nodes.json"
start_kilnd "$T/d" --node-config "$T/nodes.json" --hpa-sync-period 1 --hpa-downscale-stabilization 2

# each worker: one busy loop (a core) for 12 s, then idle; worker 0 (kiln's
# master) ends the job with status 0 at 40 s (room for slow container starts)
BURN='while :; do :; done & a=$!; sleep 12; kill $a; sleep 28'
JOB=$(cat <<JSON
{"jobId": "hpac1", "trainingInput": {"scaleTier": "CUSTOM", "region": "us-central1",
 "masterType": "n1-standard-4", "masterConfig": {"imageUri": "localhost/$IMG",
   "containerCommand": ["sh", "-c", "$BURN"]},
 "pytorchJob": {"workersOnly": true, "elasticPolicy": {"minReplicas": "1", "maxReplicas": "3",
   "metrics": [{"resource": "cpu", "targetType": "Utilization", "averageUtilization": "5"},
               {"resource": "memory", "targetType": "AverageValue", "averageValue": "32Gi"}]}}}}
JSON
)
api POST /v1/projects/p1/jobs "$JOB"
check_eq "autoscaled elastic job in containers created" "$STATUS" 200
[ "$STATUS" = 200 ] || printf '%s\n' "$BODY" >&2
check "RUNNING" wait_state hpac1 RUNNING 30
most=1 down="" mem="" end=$((SECONDS + 60))
while [ "$SECONDS" -lt "$end" ]; do
    api GET /v1/projects/p1/jobs/hpac1
    st=$(printf '%s' "$BODY" | jget state)
    cur=$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)
    m=$(printf '%s' "$BODY" | jget kilnStatus.autoscaler.metrics.1.current)
    [ -n "$m" ] && [ "$m" -gt 0 ] 2>/dev/null && mem=$m

    [ "$st" = RUNNING ] || break
    [ -n "$cur" ] && [ "$cur" -gt "$most" ] && most=$cur
    [ "$most" -ge 2 ] && [ "$cur" = 1 ] && down=1 && break
    sleep 0.2
done
check "the HPA scaled the busy container job up from 1 worker (most seen: $most)" test "$most" -ge 2
check "the workers' memory was read from their cgroups (working set: ${mem:-none} bytes)" test -n "$mem"
check "the HPA scaled the idle containers back down to minReplicas while it ran" test -n "$down"
check "the job SUCCEEDED" wait_state hpac1 SUCCEEDED 45
"$KILN" jobs stream-logs hpac1 >"$T/hpac1.logs" 2>&1
first=$(grep -m1 "Autoscaling (elasticPolicy.metrics)" "$T/hpac1.logs")
check "the first scale-up is logged with the containers' measurement" grep -q "Autoscaling (elasticPolicy.metrics): cpu [0-9]*% of requests (target 5%) over 1 worker; 1 -> [23] workers" <<<"$first"
pct=$(sed -n 's/.*: cpu \([0-9]*\)% of requests.*/\1/p' <<<"$first")
check "a busy loop in the container is more than a tenth of a core of 4 (${pct:-?}%)" test "${pct:-0}" -ge 3
check "the added workers ran in containers" grep -q "container kiln-p1-hpac1-worker-replica-0 of image localhost/$IMG" "$T/d/jobs/p1/hpac1/log.tsv"
echo "measured: up to $most workers; a worker's working set ${mem:-?} bytes; $first" | sed 's/\t/ /g'
check "a worker was taken away by the autoscaler" grep -q "left the job (the autoscaler took it away)" "$T/hpac1.logs"

finish

#!/bin/bash
# tests/service/it_elastic_hpa_gpu.sh - elasticPolicy.metrics with the
# nvidia.com/gpu Resource metric: kilnd's autoscaler reads the workers' GPU
# utilisation from its GPU watch (NVML; here the stand-in,
# tests/nvml/fake_nvml.c, playing three H100s whose utilisation the test
# sets). A workers-only elastic job, one H100 a worker (minReplicas 1,
# maxReplicas 3, target 50% busy; and a cpu target of 8 cores a worker
# that the idle workers never reach: the larger count wins, and the event
# names the metric that gave it), runs process workers (the GPU reading
# does not depend on how the worker runs; the container case of the
# measurement is it_elastic_hpa_container.sh). With the GPUs 90% busy it
# scales up from one worker; with them idle it scales back down (2 s
# stabilisation). A GPU metric on workers without GPUs is refused.
. "$(dirname "$0")/lib.sh"

LIB=$BUILD/lib/libkiln-fake-nvml.so
[ -e "$LIB" ] || { echo "SKIP: the stand-in NVML ($LIB) was not built"; exit 77; }
export KILN_FAKE_NVML_STATE=$T/state
util() { # util PERCENT: every GPU's utilisation
    local i
    for i in 0 1 2; do
        echo "$i.name=NVIDIA H100 80GB HBM3"
        echo "$i.uuid=GPU-4444444$i-0000-4000-8000-000000000000"
        echo "$i.util=$1"
    done >"$T/state.new"
    mv "$T/state.new" "$T/state"
}
util 90
start_kilnd "$T/d" --nvml-library "$LIB" --hpa-sync-period 1 --hpa-downscale-stabilization 2

gjob() { # gjob ID MASTERCONFIG-MEMBERS
    printf '{"jobId": "%s", "trainingInput": {"scaleTier": "CUSTOM", "region": "us-central1",
 "masterType": "n1-standard-4", "masterConfig": {%s"containerCommand": ["sh", "-c", "sleep 60"]},
 "pytorchJob": {"workersOnly": true, "elasticPolicy": {"minReplicas": "1", "maxReplicas": "3",
   "metrics": [{"resource": "cpu", "targetType": "AverageValue", "averageValue": "8"},
               {"resource": "nvidia.com/gpu", "targetType": "Utilization",
                "averageUtilization": "50"}]}}}}' "$1" "$2"
}
JOB=$(gjob hpag1 '"acceleratorConfig": {"count": "1", "type": "NVIDIA_H100_80GB"}, ')
api POST /v1/projects/p1/jobs "$JOB"
check_eq "GPU-autoscaled elastic job created" "$STATUS" 200
[ "$STATUS" = 200 ] || printf '%s\n' "$BODY" >&2
check "RUNNING" wait_state hpag1 RUNNING 20
most=1 busy="" end=$((SECONDS + 30))
while [ "$SECONDS" -lt "$end" ]; do
    api GET /v1/projects/p1/jobs/hpag1
    cur=$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)
    b=$(printf '%s' "$BODY" | jget kilnStatus.autoscaler.metrics.1.current)
    [ -n "$b" ] && busy=$b
    [ -n "$cur" ] && [ "$cur" -gt "$most" ] && most=$cur
    [ "$most" -ge 3 ] && break
    sleep 0.2
done
check "the HPA scaled the busy GPU job up to maxReplicas (most seen: $most)" test "$most" -ge 3
check_eq "the workers' GPUs were read 90% busy" "$busy" 90
util 0
down="" end=$((SECONDS + 30))
while [ "$SECONDS" -lt "$end" ]; do
    api GET /v1/projects/p1/jobs/hpag1
    cur=$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)
    [ "$cur" = 1 ] && down=1 && break
    sleep 0.2
done
check "the HPA scaled the idle GPU job back down to minReplicas" test -n "$down"
cp "$T/d/jobs/p1/hpag1/log.tsv" "$T/hpag1.logs"
first=$(grep -m1 "Autoscaling (elasticPolicy.metrics)" "$T/hpag1.logs")
check "the first scale-up is logged with the GPUs' utilisation (the metric that gave the count)" grep -q "Autoscaling (elasticPolicy.metrics): nvidia.com/gpu 90% busy (target 50%) over 1 worker; 1 -> 2 workers" <<<"$first"
check "the scale-down is logged" grep -q "Autoscaling (elasticPolicy.metrics): .* over [23] workers; [23] -> 1 workers" "$T/hpag1.logs"
api POST /v1/projects/p1/jobs/hpag1:cancel '{}'
check "cancelled" wait_state hpag1 CANCELLED 20

# ---- no GPUs to measure: refused at create, naming the field ----
api POST /v1/projects/p1/jobs "$(gjob hpag2 "")"
check_eq "a GPU metric on workers without GPUs is refused" "$STATUS" 400
check "naming its field" grep -q "trainingInput.pytorchJob.elasticPolicy.metrics\[1\].resource Error: nvidia.com/gpu: the workers hold no GPUs" <<<"$BODY"
finish

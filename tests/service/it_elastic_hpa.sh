#!/bin/bash
# tests/service/it_elastic_hpa.sh - elasticPolicy.metrics: kilnd is the
# elastic PyTorchJob's HorizontalPodAutoscaler (src/exec/supervisor/hpa.c).
# A workers-only elastic job (minReplicas 1, maxReplicas 3, cpu Utilization
# target 5% of its n1-standard-4's 4 vCPUs) starts with one worker whose
# process group burns up to two cores for 12 s: the HPA scales it up to
# more workers, which burn too; once they all idle it scales back down
# (a 2 s stabilisation window here), and the job SUCCEEDS when worker 0
# exits. A Kubeflow file with a Pods metric, and an nvidia.com/gpu metric
# given as an AverageValue, are refused naming the field (container workers:
# it_elastic_hpa_container.sh).
. "$(dirname "$0")/lib.sh"
command -v yes >/dev/null || { echo "SKIP: needs yes(1)"; exit 77; }

printf '{"nodes": [{"name": "n1", "address": "127.0.0.1", "cpus": 16, "memoryGb": 64}]}\n' >"$T/nodes.json"
start_kilnd "$T/d" --node-config "$T/nodes.json" --hpa-sync-period 1 --hpa-downscale-stabilization 2

# each worker: two busy loops in its process group for 12 s, then idle;
# worker 0 (kiln's master) ends the job with status 0 at 30 s
BURN='yes >/dev/null & a=$!; yes >/dev/null & b=$!; sleep 12; kill $a $b; sleep 18'
JOB=$(cat <<JSON
{"jobId": "hpa1", "trainingInput": {"scaleTier": "CUSTOM", "region": "us-central1",
 "masterType": "n1-standard-4", "masterConfig": {"containerCommand": ["sh", "-c", "$BURN"]},
 "pytorchJob": {"workersOnly": true, "elasticPolicy": {"minReplicas": "1", "maxReplicas": "3",
   "metrics": [{"resource": "cpu", "targetType": "Utilization", "averageUtilization": "5"}]}}}}
JSON
)
api POST /v1/projects/p1/jobs "$JOB"
check_eq "autoscaled elastic job created" "$STATUS" 200
[ "$STATUS" = 200 ] || printf '%s\n' "$BODY" >&2
check "RUNNING" wait_state hpa1 RUNNING 20
# (that it started with its one Worker replica is read from the autoscaler's
# first event below: with a 1 s sync period, a GET here could already see
# the second worker on a loaded machine)
# watch the worker count: up first, then back down while it still runs
most=1 down="" end=$((SECONDS + 45))
while [ "$SECONDS" -lt "$end" ]; do
    api GET /v1/projects/p1/jobs/hpa1
    st=$(printf '%s' "$BODY" | jget state)
    cur=$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)
    [ "$st" = RUNNING ] || break
    [ -n "$cur" ] && [ "$cur" -gt "$most" ] && most=$cur
    [ "$most" -ge 2 ] && [ "$cur" = 1 ] && down=1 && break
    sleep 0.2
done
check "the HPA scaled the busy job up from 1 worker (most seen: $most)" test "$most" -ge 2
check "the HPA scaled the idle job back down to minReplicas while it ran" test -n "$down"
check "the job SUCCEEDED" wait_state hpa1 SUCCEEDED 30
"$KILN" jobs stream-logs hpa1 >"$T/hpa1.logs" 2>&1
first=$(grep -m1 "Autoscaling (elasticPolicy.metrics)" "$T/hpa1.logs")
check "started with the Worker replicas (1), and the first scale-up is logged with its measurement" grep -q "Autoscaling (elasticPolicy.metrics): cpu [0-9]*% of requests (target 5%) over 1 worker; 1 -> [23] workers" <<<"$first"
check "a worker was added by the autoscaler" grep -q "Adding worker-replica-[0-9]*: the autoscaler wants more workers" "$T/hpa1.logs"
check "a worker was taken away by the autoscaler" grep -q "left the job (the autoscaler took it away)" "$T/hpa1.logs"

# ---- refusals, at create, naming the field ----
cat >"$T/pods.yaml" <<'YAML'
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: hpa-pods}
spec:
  elasticPolicy:
    minReplicas: 1
    maxReplicas: 3
    metrics:
      - type: Pods
        pods:
          metric: {name: samples_per_second}
          target: {type: AverageValue, averageValue: "100"}
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - {name: pytorch, image: localhost/x:1, command: ["true"]}
YAML
out=$("$KILN" jobs submit training --kubeflow-job "$T/pods.yaml" 2>&1)
check "a Pods metric is refused" test $? -ne 0
check "naming spec.elasticPolicy.metrics[0].type" grep -q "spec.elasticPolicy.metrics\[0\].type: 'Pods'" <<<"$out"
sed -e 's/type: Pods/type: Resource/' -e 's/pods:/resource:/' -e 's/metric: {name: samples_per_second}/name: cpu/' \
    "$T/pods.yaml" >"$T/container.yaml"
sed -i 's/name: cpu/name: nvidia.com\/gpu/' "$T/container.yaml"
out=$("$KILN" jobs submit training --kubeflow-job "$T/container.yaml" 2>&1)
check "an nvidia.com/gpu AverageValue is refused" grep -q "spec.elasticPolicy.metrics\[0\].resource.target.type: 'AverageValue': nvidia.com/gpu is measured as utilisation" <<<"$out"
api POST /v1/projects/p1/jobs '{"jobId": "hpa2", "trainingInput": {"scaleTier": "CUSTOM", "region": "us-central1", "masterType": "n1-standard-4", "masterConfig": {"containerCommand": ["true"]}, "pytorchJob": {"workersOnly": true, "elasticPolicy": {"minReplicas": "1", "maxReplicas": "3", "metrics": [{"resource": "cpu", "targetType": "AverageValue", "averageValue": "lots"}]}}}}'
check_eq "a bad averageValue is refused" "$STATUS" 400
check "naming its field" grep -q "trainingInput.pytorchJob.elasticPolicy.metrics\[0\].averageValue" <<<"$BODY"
finish

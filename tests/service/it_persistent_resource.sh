#!/bin/bash
# tests/service/it_persistent_resource.sh - a Vertex CustomJob's
# jobSpec.persistentResourceId (docs/vertex.md) with a real kilnd: the
# ClusterQueue labelled kiln.dev/persistent-resource with that id admits it,
# through the project's LocalQueue for it (its queue label set to that
# LocalQueue, the id shown back); refused at create naming the field: an id
# no ClusterQueue is, a project without a LocalQueue for it, a queue label
# naming another queue, a kilnd without --queues.
. "$(dirname "$0")/lib.sh"

cat >"$T/nodes.json" <<'JSON'
{"nodes": [{"name": "n1", "address": "127.0.0.1",
  "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}]}
JSON
cat >"$T/queues.yaml" <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: v100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: shared
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: v100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a-reserved
  labels:
    kiln.dev/persistent-resource: team-a100s
spec:
  namespaceSelector: {}
  stopPolicy: Hold
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: v100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 1}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: p1, name: default}
spec: {clusterQueue: shared}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: p1, name: reserved}
spec: {clusterQueue: team-a-reserved}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: p2, name: default}
spec: {clusterQueue: shared}
YAML

COL=locations/us-central1/customJobs
# cj NAME PRID [LABELS_JSON]: a one-replica CustomJob asking 1 V100
cj() {
    printf '{"displayName":"%s","labels":%s,"jobSpec":{"persistentResourceId":"%s","workerPoolSpecs":[{"containerSpec":{"imageUri":"localhost/kiln-never-pulled:1","command":["true"]},"machineSpec":{"machineType":"n1-standard-4","acceleratorType":"NVIDIA_TESLA_V100","acceleratorCount":1},"replicaCount":"1"}]}}' \
        "$1" "${3:-{\}}" "$2"
}

start_kilnd "$T/plain" --node-config "$T/nodes.json"
api POST "/v1/projects/p1/$COL" "$(cj a team-a100s)"
check_eq "without --queues it is refused" "$STATUS" 400
check "naming the field ($BODY)" grep -q "jobSpec.persistentResourceId" <<<"$BODY"
stop_kilnd

start_kilnd "$T/d" --node-config "$T/nodes.json" --queues "$T/queues.yaml"
api POST "/v1/projects/p1/$COL" "$(cj a team-a100s)"
check_eq "a job on the persistent resource is accepted" "$STATUS" 200
name=$(printf '%s' "$BODY" | jget name)
check_eq "its jobSpec shows the id back" "$(printf '%s' "$BODY" | jget jobSpec.persistentResourceId)" team-a100s
check_eq "its queue label names the resource's LocalQueue" \
    "$(printf '%s' "$BODY" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["labels"].get("kueue.x-k8s.io/queue-name", ""))')" \
    reserved
id=${name##*/}
sleep 2
api GET "/v1/projects/p1/jobs/customjob_$id" # its ml v1 view
reason=$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)
check "it waits in that ClusterQueue, which is held ($reason)" \
    grep -q "ClusterQueue team-a-reserved has stopPolicy Hold" <<<"$reason"

api POST "/v1/projects/p1/$COL" "$(cj b no-such-resource)"
check_eq "an id no ClusterQueue is is refused" "$STATUS" 400
check "naming the field and the label ($BODY)" \
    grep -q "jobSpec.persistentResourceId.*kiln.dev/persistent-resource" <<<"$BODY"
api POST "/v1/projects/p2/$COL" "$(cj c team-a100s)"
check_eq "a project without a LocalQueue for it is refused" "$STATUS" 400
check "saying so ($BODY)" grep -q "project p2 has no LocalQueue for it" <<<"$BODY"
api POST "/v1/projects/p1/$COL" "$(cj d team-a100s '{"kueue.x-k8s.io/queue-name":"default"}')"
check_eq "a queue label naming another queue is refused" "$STATUS" 400
check "saying which ($BODY)" grep -q "names default" <<<"$BODY"
api POST "/v1/projects/p1/$COL/$id:cancel" '{}'
stop_kilnd
finish

#!/bin/bash
# tests/service/it_topology.sh - topology-aware scheduling (docs/queues.md)
# with a real kilnd on simulated GPUs: 2 blocks x 2 racks x 2 nodes x 4 V100s,
# a Topology over block, rack and hostname, a flavor pointing at it. A
# job whose workers require a rack (the field Kueue's pod template annotation
# is read into) lands on one rack's two nodes; an ml v1 job asking by label for one rack
# (master and workers together) too; one that no rack could ever hold is
# refused at submit saying why, and in a block it runs; with every rack short, a rack-level gang waits and its reason
# names the level. Refused at submit: a level no flavor's Topology has, and
# a request to a kilnd without --queues.
. "$(dirname "$0")/lib.sh"

{
    printf '{"nodes": ['
    for i in 0 1 2 3 4 5 6 7; do
        b=$((i / 4 + 1)) r=$((i / 2 % 2 + 1)) n=$((i % 2 + 1))
        [ $i -gt 0 ] && printf ','
        printf '{"name": "b%s-r%s-n%s", "address": "127.0.0.1", "labels": {"pool": "tas", "cloud.provider.com/topology-block": "block-%s", "cloud.provider.com/topology-rack": "rack-%s"}, "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 4}]}' \
            $b $r $n $b $r
    done
    printf ']}\n'
} >"$T/nodes.json"

cat >"$T/queues.yaml" <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata:
  name: default
spec:
  levels:
  - nodeLabel: cloud.provider.com/topology-block
  - nodeLabel: cloud.provider.com/topology-rack
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: tas-flavor
spec:
  nodeLabels:
    pool: tas
  topologyName: default
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: tas-cq
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: tas-flavor
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 64
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  namespace: p1
  name: default
spec:
  clusterQueue: tas-cq
YAML

# tjob NAME WORKERS GPUS MODE LEVEL: a master without GPUs and WORKERS
# workers of GPUS V100s whose config asks (the field a Kubeflow file's
# kueue.x-k8s.io/podset-MODE-topology annotation is read into: test_topology)
tjob() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c","sleep 300"]},"workerType":"n1-standard-4","workerCount":"%s","workerConfig":{"acceleratorConfig":{"count":"%s","type":"NVIDIA_TESLA_V100"},"topology":{"%s":"%s"},"containerCommand":["sh","-c","sleep 300"]}}}' \
        "$1" "$2" "$3" "$4" "$5"
}
submit() { # submit NAME WORKERS GPUS MODE LEVEL
    api POST /v1/projects/p1/jobs "$(tjob "$@")"
}
# mljob ID LABEL LEVEL: an ml v1 master and one worker, 4 V100s each
mljob() {
    printf '{"jobId":"%s","labels":{"%s":"%s"},"trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"4","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","sleep 300"]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"acceleratorConfig":{"count":"4","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","sleep 300"]}}}' \
        "$1" "$2" "$3"
}
nodes_of() { # nodes_of JOB: the nodes its replicas run on
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(sorted(r.get("node", "") for r in d.get("kilnStatus", {}).get("replicas", [])
                     if r.get("role") == "worker" or sys.argv[1] == "all")))' "${2:-workers}"
}
racks_of() { # racks_of JOB [all]: the distinct b?-r? of its workers' (all: replicas') nodes
    nodes_of "$1" "${2:-workers}" | tr ' ' '\n' | sed 's/-n[0-9]*$//' | sort -u | tr '\n' ' ' | sed 's/ $//'
}
reason_of() {
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | jget kilnStatus.queue.reason
}

# without --queues a request cannot be honoured: refused at submit
start_kilnd "$T/plain" --node-config "$T/nodes.json"
api POST /v1/projects/p1/jobs "$(mljob plain kiln-required-topology topology-rack)"
check_eq "without --queues a topology request is refused" "$STATUS" 400
check "naming the field and --queues" grep -q "topology.*--queues" <<<"$BODY"
stop_kilnd

start_kilnd "$T/d" --node-config "$T/nodes.json" --queues "$T/queues.yaml"

submit rack8 2 4 required cloud.provider.com/topology-rack
check_eq "a job whose workers require a rack is accepted" "$STATUS" 200
check "it runs" wait_state rack8 RUNNING
w=$(nodes_of rack8 | tr ' ' '\n' | sort | uniq -c | wc -l)
check_eq "its workers on one rack's two nodes" "$(racks_of rack8 | wc -w) $w" "1 2"

api POST /v1/projects/p1/jobs "$(mljob ml8 kiln-required-topology topology-rack)"
check_eq "an ml v1 job asking by label is accepted" "$STATUS" 200
check "it runs" wait_state ml8 RUNNING
check_eq "its master and worker share one rack" "$(racks_of ml8 all | wc -w) $(nodes_of ml8 all | wc -w)" "1 2"
check "not rack8's" test "$(racks_of ml8)" != "$(racks_of rack8)"

# 4 x 4 GPUs in one rack of 8: never, refused at submit saying why
submit rack16 4 4 required cloud.provider.com/topology-rack
check_eq "a gang no rack could ever hold is refused" "$STATUS" 400
check "saying which level and how much room its largest domain has ($BODY)" \
    grep -q "require one cloud.provider.com/topology-rack domain of Topology default: the largest one holds 2 of their 4, even with the cluster idle" <<<"$BODY"
submit block16 4 4 required cloud.provider.com/topology-block
check_eq "the same gang requiring a block is accepted" "$STATUS" 200
check "and runs, in one block" wait_state block16 RUNNING
check_eq "its workers in one block" "$(nodes_of block16 | tr ' ' '\n' | cut -d- -f1 | sort -u | wc -l)" 1
"$KILN" jobs cancel block16 >/dev/null 2>&1
check "block16 cancelled" wait_state block16 CANCELLED

# 3 x 2 GPUs in each free rack (two on one node, one on the other: the
# fewest nodes), so that no node of a free rack has 4 GPUs free
for j in f1 f2; do
    submit $j 3 2 required cloud.provider.com/topology-rack
    check_eq "$j accepted" "$STATUS" 200
    check "$j runs" wait_state $j RUNNING
done
check "f1 and f2 took the two racks left" test "$(racks_of f1)" != "$(racks_of f2)"
submit late 2 4 required cloud.provider.com/topology-rack
sleep 2
check_eq "a rack-level gang waits" "$(job_state late)" QUEUED
D=$("$KILN" jobs describe late 2>&1)
check "kiln jobs describe says which level is short ($D)" \
    grep -q "cloud.provider.com/topology-rack domain of Topology default: the freest one now holds 0 of their 2" <<<"$D"
"$KILN" jobs cancel rack8 >/dev/null 2>&1
check "once a rack is free it runs" wait_state late RUNNING 30
check_eq "on one rack" "$(racks_of late | wc -w)" 1

# a level no flavor's Topology has: refused at submit
submit zone 1 1 required topology.kubernetes.io/zone
check_eq "a level no Topology has is refused" "$STATUS" 400
check "naming it ($BODY)" grep -q "topology level 'topology.kubernetes.io/zone'" <<<"$BODY"
stop_kilnd
finish

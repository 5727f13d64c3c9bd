#!/bin/bash
# tests/service/it_kueue_afs.sh - admission fair sharing (docs/queues.md) on
# a live kilnd with one simulated V100: ClusterQueue "shared" has
# admissionScope UsageBasedAdmissionFairSharing and two LocalQueues (projects
# a and b). a1 runs; a2 and a3 (older) and then b1 wait. When a1 ends the GPU
# goes to b1: LocalQueue b has used nothing, a has (a1's entry penalty and
# its running usage), although a2 and a3 were submitted first. The same file
# without admissionScope admits a2 first (plain BestEffortFIFO).
. "$(dirname "$0")/lib.sh"

cat >"$T/nodes.json" <<'JSON'
{"nodes": [
  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 1}]}
]}
JSON
queues() { # queues SCOPE_LINES LQ_LINES
    printf 'apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: v100\n'
    printf -- '---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: shared\nspec:\n  namespaceSelector: {}\n%b  resourceGroups:\n  - coveredResources: ["nvidia.com/gpu"]\n    flavors:\n    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: 1\n' "$1"
    for p in a b; do
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  namespace: %s\n  name: default\nspec:\n  clusterQueue: shared\n%b' "$p" "$2"
    done
}
gjob() { # gjob ID SECONDS, or gjob ID FILE: until FILE exists
    local cmd="sleep $2"
    case $2 in /*) cmd="while [ ! -e $2 ]; do sleep 0.1; done" ;; esac
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","%s"]}}}' "$1" "$cmd"
}
st() { api GET "/v1/projects/$1/jobs/$2"; printf '%s' "$BODY" | jget state; }
# run DIR SCOPE LQ_LINES: a1 then a2, a3, b1; FIRST: which of a2/b1 starts after a1
run() {
    local run=$1 # the loops below set their own positional parameters
    queues "$2" "$3" >"$T/$1.yaml"
    start_kilnd "$T/$1" --node-config "$T/nodes.json" --queues "$T/$1.yaml"
    # a1 runs until the test lets it end (a fixed time ran out on a loaded
    # machine before the others were even submitted)
    api POST /v1/projects/a/jobs "$(gjob a1 "$T/$run.a1-ends")"
    [ "$STATUS" = 200 ] || fail "submit a1: $STATUS"
    local i
    for i in $(seq 1 100); do [ "$(st a a1)" = RUNNING ] && break; sleep 0.1; done
    check_eq "$1: a1 runs" "$(st a a1)" RUNNING
    for j in "a a2" "a a3" "b b1"; do
        set -- $j
        api POST "/v1/projects/$1/jobs" "$(gjob "$2" 30)"
        [ "$STATUS" = 200 ] || fail "submit $2: $STATUS"
        sleep 0.2
    done
    # the order is only decided once a1 ends: it must still run now
    check_eq "$run: a1 still runs while a2, a3 and b1 wait" "$(st a a1)/$(st a a2)/$(st b b1)" RUNNING/QUEUED/QUEUED
    touch "$T/$run.a1-ends"
    FIRST=""
    for i in $(seq 1 300); do
        [ "$(st b b1)" = RUNNING ] && FIRST=b1 && break
        [ "$(st a a2)" = RUNNING ] && FIRST=a2 && break
        sleep 0.1
    done
    for j in "a a2" "a a3" "b b1"; do
        set -- $j
        api POST "/v1/projects/$1/jobs/$2:cancel" '{}'
    done
    stop_kilnd
}
run afs '  admissionScope:\n    admissionMode: UsageBasedAdmissionFairSharing\n' '  fairSharing:\n    weight: "1"\n'
check_eq "with admission fair sharing: LocalQueue b (nothing used) goes before a's older jobs" "$FIRST" b1
run fifo '' ''
check_eq "without it: BestEffortFIFO, a2 (older) first" "$FIRST" a2
finish

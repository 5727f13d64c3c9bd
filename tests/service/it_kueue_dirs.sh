#!/bin/bash
# tests/service/it_kueue_dirs.sh - kilnd --queues PATH, repeatable, each a file
# or a directory (docs/queues.md, "Files and directories"), on a live kilnd:
# a directory's *.yaml/*.yml and a second --queues are one set (the
# ClusterQueue in the directory, its LocalQueue in the other file, v1beta2
# and v1beta1 mixed); SIGHUP reloads them all; one bad file refuses the
# whole reload (a good new file beside it is not taken either) and the
# running set goes on; a later good reload takes every file. The queues
# cover pods: a job's replicas are counted against it.
. "$(dirname "$0")/lib.sh"

cat >"$T/nodes.json" <<'JSON'
{"nodes": [
  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}
]}
JSON
cq() { # cq NAME: a v1beta2 ClusterQueue of 1 V100 and 1 pod
    printf 'apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: %s\nspec:\n  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: ["nvidia.com/gpu", "pods"]\n    flavors:\n    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: 1\n      - name: pods\n        nominalQuota: 1\n' "$1"
}
lq() { # lq VERSION PROJECT CQ
    printf 'apiVersion: kueue.x-k8s.io/%s\nkind: LocalQueue\nmetadata:\n  namespace: %s\n  name: default\nspec:\n  clusterQueue: %s\n' "$1" "$2" "$3"
}
gjob() { # gjob ID: one V100 for a minute
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","sleep 60"]}}}' "$1"
}
mkdir -p "$T/conf" "$T/empty"
printf 'apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: v100\n' >"$T/conf/00-flavor.yaml"
cq team-a >"$T/conf/team-a.yml"
echo "notes: not a queues file" >"$T/conf/README.txt"
lq v1beta1 team-a team-a >"$T/lq-a.yaml"

# a directory with no YAML: kilnd does not start, naming it
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/bad" --queues "$T/empty" 2>"$T/bad.err"
check_eq "--queues of an empty directory: kilnd does not start" "$?" 1
check "it names the directory" grep -q "$T/empty: a directory with no \*.yaml" "$T/bad.err"

start_kilnd "$T/d" --node-config "$T/nodes.json" --queues "$T/conf" --queues "$T/lq-a.yaml"
api GET /v1/queues
check "the directory's ClusterQueue is loaded" grep -q '"name": *"team-a"' <<<"$BODY"
api POST /v1/projects/team-a/jobs "$(gjob a1)"
check_eq "the second --queues adds its LocalQueue (not replacing the first)" "$STATUS" 200
api GET "/v1/queues/team-a?view=kueue"
check_eq "?view=kueue: a v1beta2 object" "$(printf '%s' "$BODY" | jget apiVersion)" kueue.x-k8s.io/v1beta2
check_eq "?view=kueue: spec.queueingStrategy defaulted" "$(printf '%s' "$BODY" | jget spec.queueingStrategy)" BestEffortFIFO
check_eq "?view=kueue: status.admittedWorkloads" "$(printf '%s' "$BODY" | jget status.admittedWorkloads)" 1
# pods: a1's one replica holds team-a's one pod; a CPU-only job (no GPU
# asked) still waits, for pods
api POST /v1/projects/team-a/jobs '{"jobId":"a2","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c","sleep 60"]}}}'
check_eq "a2 submitted" "$STATUS" 200
sleep 1
api GET /v1/projects/team-a/jobs/a2
check_eq "a2 waits" "$(printf '%s' "$BODY" | jget state)" QUEUED
check "for pods ($(printf '%s' "$BODY" | jget kilnStatus.queue.reason))" \
    grep -q "^ClusterQueue team-a: pods of flavor v100: asks 1, 1 of nominalQuota 1 in use" <<<"$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)"
api GET "/v1/queues/team-a?view=nonsense"
check_eq "?view=nonsense: 400" "$STATUS" 400

# a new good file and a bad one: the reload is refused as a whole
cq team-b >"$T/conf/team-b.yaml"
{ echo ---; lq v1beta2 team-b team-b; } >>"$T/conf/team-b.yaml"
printf 'apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: t4\nspec:\n  colour: blue\n' >"$T/conf/zz-bad.yaml"
kill -HUP "$KPID"
check "the refused reload is logged" wait_file "$T/d/kilnd.err" "do not load; still admitting with the old set" 5
check "naming the bad file and its field" wait_file "$T/d/kilnd.err" "$T/conf/zz-bad.yaml: ResourceFlavor t4: spec.colour" 5
api GET /v1/queues/team-b
check_eq "team-b (a good file beside the bad one) is not taken" "$STATUS" 404
api POST /v1/projects/team-b/jobs "$(gjob b1)"
check_eq "team-b's jobs still have no queue" "$STATUS" 400
api GET /v1/queues/team-a
check_eq "the running set goes on: team-a" "$STATUS" 200
check_eq "a1 still admitted in it, a2 pending" "$(printf '%s' "$BODY" | jget admittedWorkloads)/$(printf '%s' "$BODY" | jget pendingWorkloads)" 1/1

# the bad file fixed (removed): every file taken
rm "$T/conf/zz-bad.yaml"
kill -HUP "$KPID"
check "the reload is logged" wait_file "$T/d/kilnd.err" "reloaded the queues files (2 --queues; 2 ClusterQueues, 2 LocalQueues)" 5
api POST /v1/projects/team-b/jobs "$(gjob b1)"
check_eq "team-b routes now" "$STATUS" 200
api GET /v1/queues/team-b
check_eq "team-b is listed" "$STATUS" 200
api POST /v1/projects/team-a/jobs/a1:cancel '{}'
api POST /v1/projects/team-a/jobs/a2:cancel '{}'
api POST /v1/projects/team-b/jobs/b1:cancel '{}'
finish

#!/bin/bash
# tests/service/it_gpu.sh - GPU scheduling on simulated devices (a node
# config declaring 2 nodes x 2 V100): gang placement, exclusive devices under
# concurrent jobs, queue order by priority then submit time with jobPosition,
# never-fits failing at once with a reason, node listings marking SIMULATED.
. "$(dirname "$0")/lib.sh"

cat >"$T/nodes.json" <<'EOF'
{"nodes": [
  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]},
  {"name": "gpu-b", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}
]}
EOF
# a site catalog may lower the maxWaitTime floor (1800 s in the built-in one)
printf 'defaults:\n  minMaxWaitTimeSeconds: 1\n' >"$T/site.yaml"
start_kilnd "$T/d" --node-config "$T/nodes.json" --catalog "$T/site.yaml"

# gpu_job ID PRIORITY MASTER_GPUS WORKER_COUNT WORKER_GPUS [TYPE] [CMD]
gpu_job() {
    local w=""
    [ "$4" -gt 0 ] && w=",\"workerType\":\"n1-standard-4\",\"workerCount\":\"$4\",\"workerConfig\":{\"acceleratorConfig\":{\"count\":\"$5\",\"type\":\"${6:-NVIDIA_TESLA_V100}\"},\"containerCommand\":[\"sh\",\"-c\",\"${7:-sleep 30}\"]}"
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","scheduling":{"priority":%s},"masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"%s","type":"%s"},"containerCommand":["sh","-c","%s"]}%s}}' \
        "$1" "$2" "$3" "${6:-NVIDIA_TESLA_V100}" "${7:-sleep 30}" "$w"
}

api GET /v1/nodes
check_eq "two nodes" "$(printf '%s' "$BODY" | jget nodes.1.name)" gpu-b
check_eq "capacity" "$(printf '%s' "$BODY" | jget nodes.0.capacity.NVIDIA_TESLA_V100)" 2
check_eq "simulated marked" "$(printf '%s' "$BODY" | jget nodes.0.devices.0.simulated)" true
check "cli marks SIMULATED" grep -q SIMULATED <<<"$("$KILN" nodes list)"

# A: master 2 + worker 2 = every GPU, one replica per node
api POST /v1/projects/p1/jobs "$(gpu_job a_job 0 2 1 2)"
check_eq "A created" "$STATUS" 200
check "A running" wait_state a_job RUNNING 10
api GET /v1/projects/p1/jobs/a_job
nodes=$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; r=json.load(sys.stdin)["kilnStatus"]["replicas"]; print(" ".join(sorted(x["node"]+":"+",".join(map(str,x["gpus"])) for x in r)), all(x["simulatedGpus"] for x in r))')
check_eq "A placed whole, one node each" "$nodes" "gpu-a:0,1 gpu-b:0,1 True"
api GET /v1/nodes
check_eq "no V100 allocatable" "$(printf '%s' "$BODY" | jget nodes.0.allocatable.NVIDIA_TESLA_V100)" 0
check_eq "CPU capacity advertised" "$(printf '%s' "$BODY" | jget nodes.0.capacity.cpu)" "$(getconf _NPROCESSORS_ONLN)"
check_eq "CPUs taken by the n1-standard-4 replica" "$(printf '%s' "$BODY" | jget nodes.0.allocatable.cpu)" "$(( $(getconf _NPROCESSORS_ONLN) > 4 ? $(getconf _NPROCESSORS_ONLN) - 4 : 0 ))"

# B (priority 0) then C (priority 10): both wait; C is first in the queue
api POST /v1/projects/p1/jobs "$(gpu_job b_job 0 2 1 2)"
sleep 0.05
api POST /v1/projects/p1/jobs "$(gpu_job c_job 10 2 1 2)"
sleep 0.3
check_eq "B queued" "$(job_state b_job)" QUEUED
api GET /v1/projects/p1/jobs/c_job
check_eq "C position 1" "$(printf '%s' "$BODY" | jget jobPosition)" 1
api GET /v1/projects/p1/jobs/b_job
check_eq "B position 2" "$(printf '%s' "$BODY" | jget jobPosition)" 2

# maxWaitTime: a job still queued when it expires is cancelled, with the reason
w=$(gpu_job w_job 0 1 0 0)
api POST /v1/projects/p1/jobs "${w/\"priority\":0/\"priority\":0,\"maxWaitTime\":\"1s\"}"
check_eq "maxWaitTime job accepted" "$STATUS" 200
check "maxWaitTime -> CANCELLED" wait_state w_job CANCELLED 15
api GET /v1/projects/p1/jobs/w_job
check "maxWaitTime reason" grep -q maxWaitTime <<<"$(printf '%s' "$BODY" | jget errorMessage)"

# never fits: 4 V100 on one node (nodes have 2); a T4; a TPU-less cluster
api POST /v1/projects/p1/jobs "$(gpu_job d_job 0 4 0 0)"
check "D fails at once" wait_state d_job FAILED 10
api GET /v1/projects/p1/jobs/d_job
msg=$(printf '%s' "$BODY" | jget errorMessage)
check "D names what is missing ($msg)" grep -q "4 x NVIDIA_TESLA_V100.*most any node has is 2" <<<"$msg"
api POST /v1/projects/p1/jobs "$(gpu_job e_job 0 1 0 0 NVIDIA_TESLA_T4)"
check "E (T4) fails at once" wait_state e_job FAILED 10
api GET /v1/projects/p1/jobs/e_job
check "E names T4" grep -q "NVIDIA_TESLA_T4" <<<"$(printf '%s' "$BODY" | jget errorMessage)"
check_eq "B still queued (not failed)" "$(job_state b_job)" QUEUED

# free A: C (higher priority) runs, B waits
api POST /v1/projects/p1/jobs/a_job:cancel '{}'
check "A cancelled" wait_state a_job CANCELLED 10
check "C runs" wait_state c_job RUNNING 10
check_eq "B still queued" "$(job_state b_job)" QUEUED
api GET /v1/projects/p1/jobs/b_job
check_eq "B now first" "$(printf '%s' "$BODY" | jget jobPosition)" 1
api POST /v1/projects/p1/jobs/c_job:cancel '{}'
check "B runs after C" wait_state b_job RUNNING 10
api POST /v1/projects/p1/jobs/b_job:cancel '{}'
check "B cancelled" wait_state b_job CANCELLED 10

# nodeSelector (Kubeflow): a replica lands only on nodes with those labels
sel_job() { # ID KEY VALUE
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"nodeSelector":{"%s":"%s"},"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","sleep 30"]}}}' "$1" "$2" "$3"
}
api POST /v1/projects/p1/jobs "$(sel_job sel_b kiln.dev/node gpu-b)"
check "selector job runs" wait_state sel_b RUNNING 10
api GET /v1/projects/p1/jobs/sel_b
check_eq "on the selected node" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.node)" gpu-b
api POST /v1/projects/p1/jobs "$(sel_job sel_v100 cloud.google.com/gke-accelerator nvidia-tesla-v100)"
check "GKE accelerator label matches the V100 nodes" wait_state sel_v100 RUNNING 10
api POST /v1/projects/p1/jobs "$(sel_job sel_t4 cloud.google.com/gke-accelerator nvidia-tesla-t4)"
check "unsatisfiable selector fails at once" wait_state sel_t4 FAILED 10
api GET /v1/projects/p1/jobs/sel_t4
check "reason names the selector" grep -q "nodeSelector.*nvidia-tesla-t4" <<<"$(printf '%s' "$BODY" | jget errorMessage)"
api POST /v1/projects/p1/jobs/sel_b:cancel '{}'
api POST /v1/projects/p1/jobs/sel_v100:cancel '{}'
check "sel_b cancelled" wait_state sel_b CANCELLED 10
check "sel_v100 cancelled" wait_state sel_v100 CANCELLED 10

# drain moves a job to another node: requeued, placed on gpu-b, restart counted
api POST /v1/projects/p1/jobs "$(sel_job mover kiln.dev/node gpu-a | sed 's/"nodeSelector":{"kiln.dev\/node":"gpu-a"},//')"
check "mover runs" wait_state mover RUNNING 10
api GET /v1/projects/p1/jobs/mover
first=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.node)
api POST "/v1/nodes/$first:drain" '{}'
check_eq "drain accepted" "$STATUS" 200
for _ in $(seq 1 200); do
    api GET /v1/projects/p1/jobs/mover
    [ "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" = 1 ] && [ "$(printf '%s' "$BODY" | jget state)" = RUNNING ] && break
    sleep 0.05
done
check_eq "mover running again" "$(printf '%s' "$BODY" | jget state)" RUNNING
check_eq "restart counted" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 1
check "moved off the drained node ($first)" test "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.node)" != "$first"
api POST "/v1/nodes/$first:uncordon" '{}'
api POST /v1/projects/p1/jobs/mover:cancel '{}'
check "mover cancelled" wait_state mover CANCELLED 10

# queue order per accelerator type: a small V100 job submitted after a big
# waiting one does not jump ahead of it; a CPU-only job does
api POST /v1/projects/p1/jobs "$(gpu_job hold2 0 2 0 0)"
check "hold2 runs" wait_state hold2 RUNNING 10
api POST /v1/projects/p1/jobs "$(gpu_job big4 0 2 1 2)"
sleep 0.05
api POST /v1/projects/p1/jobs "$(gpu_job small2 0 2 0 0)"
api POST /v1/projects/p1/jobs '{"jobId":"cpu_only","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","sleep 30"]}}}'
check "a CPU-only job runs past the waiting GPU jobs" wait_state cpu_only RUNNING 10
sleep 0.3
check_eq "big4 waits" "$(job_state big4)" QUEUED
check_eq "small2 does not jump ahead of big4" "$(job_state small2)" QUEUED
api POST /v1/projects/p1/jobs/hold2:cancel '{}'
check "big4 runs once hold2 is gone" wait_state big4 RUNNING 10
check_eq "small2 still waits" "$(job_state small2)" QUEUED
api POST /v1/projects/p1/jobs/big4:cancel '{}'
check "small2 runs last" wait_state small2 RUNNING 10
for j in small2 cpu_only; do api POST "/v1/projects/p1/jobs/$j:cancel" '{}'; done
check "small2 cancelled" wait_state small2 CANCELLED 10

# exclusivity under concurrency: 8 one-GPU jobs of ~0.6 s submitted at once;
# at every instant no (node, gpu) is held by two running replicas
subs=()
for i in 1 2 3 4 5 6 7 8; do
    api POST /v1/projects/p1/jobs "$(gpu_job "x_$i" 0 1 0 0 NVIDIA_TESLA_V100 'echo CUDA=$CUDA_VISIBLE_DEVICES SIM=$KILN_SIMULATED_DEVICES; sleep 0.6')" &
    subs+=($!)
done
wait "${subs[@]}" # not a bare `wait`: kilnd is a child too
viol=0
max_running=0
for _ in $(seq 1 200); do
    api GET "/v1/projects/p1/jobs?filter=jobId:x_*&pageSize=100"
    r=$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
jobs = json.load(sys.stdin).get("jobs", [])
reps = [x for j in jobs if j["state"] == "RUNNING"
        for x in j.get("kilnStatus", {}).get("replicas", []) if x["state"] == "RUNNING"]
held = [(x["node"], g) for x in reps for g in x["gpus"]]
ports = [x["port"] for x in reps]
done = sum(j["state"] == "SUCCEEDED" for j in jobs)
print(len(held) != len(set(held)) or len(ports) != len(set(ports)), len(held), done)')
    set -- $r
    [ "$1" = True ] && viol=$((viol + 1))
    [ "$2" -gt "$max_running" ] && max_running=$2
    [ "$3" = 8 ] && break
    sleep 0.05
done
check_eq "all 8 finished" "$3" 8
check_eq "no device (or port) held twice" "$viol" 0
check "never more than 4 GPUs in use ($max_running)" test "$max_running" -le 4
check "some ran concurrently ($max_running)" test "$max_running" -ge 2
"$KILN" jobs stream-logs x_1 >"$T/x1"
check "replica saw one simulated GPU" grep -qE 'CUDA=[01] SIM=1$' "$T/x1"

finish

#!/bin/bash
# tests/service/it_metrics.sh - GET /metrics on a live kilnd with jobs in
# every state (PREPARING only passes by): Prometheus' own `promtool check
# metrics` accepts the exposition, and the numbers are the ones the jobs
# and nodes show. Also trainingOutput (consumedMLUnits, the last training
# metrics a job reported) and who may read /metrics under a tokens file.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need promtool

cat >"$T/nodes.json" <<'JSON'
{"nodes": [{"name": "gpu-a", "address": "127.0.0.1",
  "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}]}
JSON
# the grace period is long so that a job ignoring SIGTERM stays CANCELLING
start_kilnd "$T/d" --node-config "$T/nodes.json" --grace-period 60

gpu_job() { # gpu_job ID GPUS CMD
    local cmd
    cmd=$(printf '%s' "$3" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"%s","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c",%s]}}}' \
        "$1" "$2" "$cmd"
}
report='{"event":"epoch","epoch":1,"step":10,"loss":0.5,"accuracy":0.75,"samples_per_sec":1234.5}'
report2='{"event":"epoch","epoch":2,"step":20,"loss":0.25,"accuracy":0.875,"samples_per_sec":1500}'

api POST /v1/projects/p1/jobs "$(job_json ok_job "echo '$report'; echo '$report2'; echo '{\"event\":\"epoch\",\"rank\":1,\"loss\":9}'")"
api POST /v1/projects/p1/jobs "$(job_json bad_job 'exit 3')"
flag=$T/flag
api POST /v1/projects/p1/jobs '{"jobId":"retry_job","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"restartPolicy":"OnFailure","containerCommand":["sh","-c","if [ -e '"$flag"' ]; then exit 0; fi; touch '"$flag"'; exit 1"]}}}'
check_eq "retry_job created" "$STATUS" 200
check "ok_job SUCCEEDED" wait_state ok_job SUCCEEDED 20
check "bad_job FAILED" wait_state bad_job FAILED 20
check "retry_job SUCCEEDED after a restart" wait_state retry_job SUCCEEDED 20
api POST /v1/projects/p1/jobs "$(gpu_job gpu_job 2 "echo '$report'; exec sleep 60")"
check "gpu_job RUNNING" wait_state gpu_job RUNNING 20
api POST /v1/projects/p1/jobs "$(gpu_job wait_job 2 'sleep 1')"
api POST /v1/projects/p1/jobs "$(gpu_job gone_job 1 'sleep 1')"
api POST /v1/projects/p1/jobs/gone_job:cancel '{}'
api POST /v1/projects/p1/jobs "$(job_json stubborn_job "trap '' TERM; echo started; while :; do sleep 1; done")"
check "stubborn_job RUNNING" wait_state stubborn_job RUNNING 20
api POST /v1/projects/p1/jobs/stubborn_job:cancel '{}'
check "stubborn_job CANCELLING" wait_state stubborn_job CANCELLING 5
check_eq "wait_job QUEUED" "$(job_state wait_job)" QUEUED
check_eq "gone_job CANCELLED" "$(job_state gone_job)" CANCELLED
# the gpu job's report arrives on its own schedule: wait for it to be taken in
for _ in $(seq 1 100); do
    api GET /v1/projects/p1/jobs/gpu_job
    [ -n "$(printf '%s' "$BODY" | jget trainingOutput.metrics.loss)" ] && break
    sleep 0.05
done
api GET /v1/projects/p1/jobs/nope # a 404 for the request counter

curl -s -m 10 -D "$T/headers" -o "$T/metrics" "$URL/metrics"
check "text format content type" grep -qi '^content-type: text/plain; version=0.0.4' "$T/headers"
if ! promtool check metrics <"$T/metrics" >"$T/promtool.out" 2>&1; then
    fail "promtool check metrics: $(cat "$T/promtool.out")"
else
    ok
fi
m() { grep -E "^$1 " "$T/metrics" | awk '{print $2}'; }
check_eq "SUCCEEDED jobs" "$(m 'kiln_jobs\{state="SUCCEEDED"\}')" 2
check_eq "FAILED jobs" "$(m 'kiln_jobs\{state="FAILED"\}')" 1
check_eq "RUNNING jobs" "$(m 'kiln_jobs\{state="RUNNING"\}')" 1
check_eq "QUEUED jobs" "$(m 'kiln_jobs\{state="QUEUED"\}')" 1
check_eq "CANCELLING jobs" "$(m 'kiln_jobs\{state="CANCELLING"\}')" 1
check_eq "CANCELLED jobs" "$(m 'kiln_jobs\{state="CANCELLED"\}')" 1
check_eq "PREPARING jobs (none now, but shown)" "$(m 'kiln_jobs\{state="PREPARING"\}')" 0
check_eq "queue length" "$(m kiln_queue_length)" 1
check "oldest queued age > 0" awk '$1=="kiln_queue_oldest_age_seconds" && $2>0 {f=1} END {exit !f}' "$T/metrics"
check "scheduling passes timed (kiln_schedule_pass_seconds)" awk '$1=="kiln_schedule_pass_seconds_count" && $2>0 {f=1} END {exit !f}' "$T/metrics"
check "schedule pass histogram: +Inf bucket = count" awk '$1=="kiln_schedule_pass_seconds_bucket{le=\"+Inf\"}" {b=$2} $1=="kiln_schedule_pass_seconds_count" {c=$2} END {exit !(b==c && c>0)}' "$T/metrics"
check_eq "replicas running (gpu_job, stubborn_job)" "$(m kiln_replicas_running)" 2
check_eq "restart by failure" "$(m 'kiln_restarts_total\{reason="replica_failure"\}')" 1
check_eq "failure by replica exit" "$(m 'kiln_job_failures_total\{reason="replica_exit"\}')" 1
check_eq "V100 allocated" "$(m 'kiln_accelerators_allocated\{node="gpu-a",type="NVIDIA_TESLA_V100"\}')" 2
check_eq "V100 allocatable" "$(m 'kiln_accelerators_allocatable\{node="gpu-a",type="NVIDIA_TESLA_V100"\}')" 0
check_eq "V100 capacity" "$(m 'kiln_accelerators_capacity\{node="gpu-a",type="NVIDIA_TESLA_V100"\}')" 2
check_eq "gpu_job loss gauge" "$(m 'kiln_job_training_loss\{project="p1",job="gpu_job"\}')" 0.5
check_eq "gpu_job samples/s gauge" "$(m 'kiln_job_training_samples_per_second\{project="p1",job="gpu_job"\}')" 1234.5
check "404 counted under its route template" grep -q '^kiln_api_requests_total{method="GET",route="/v1/projects/{project}/jobs/{job}",code="404"} [1-9]' "$T/metrics"
check "POST cancel counted" grep -q '^kiln_api_requests_total{method="POST",route="/v1/projects/{project}/jobs/{job}:cancel",code="200"} 2' "$T/metrics"
check "latency histogram (7 creates)" grep -q '^kiln_api_request_duration_seconds_bucket{method="POST",route="/v1/projects/{project}/jobs",le="+Inf"} 7' "$T/metrics"
check "store writes timed" awk '$1=="kiln_store_write_duration_seconds_count" && $2>10 {f=1} END {exit !f}' "$T/metrics"

# trainingOutput: every job has it; the chief's last report, not a worker's
api GET /v1/projects/p1/jobs/ok_job
check_eq "ok_job last loss" "$(printf '%s' "$BODY" | jget trainingOutput.metrics.loss)" 0.25
check_eq "ok_job last epoch" "$(printf '%s' "$BODY" | jget trainingOutput.metrics.epoch)" 2
check_eq "ok_job samples/s" "$(printf '%s' "$BODY" | jget trainingOutput.metrics.samplesPerSecond)" 1500
check_eq "not a tuning job" "$(printf '%s' "$BODY" | jget trainingOutput.isHyperparameterTuningJob)" false
api GET /v1/projects/p1/jobs/wait_job
check_eq "queued job: 0 ML units" "$(printf '%s' "$BODY" | jget trainingOutput.consumedMLUnits)" 0.0
api GET /v1/projects/p1/jobs/gpu_job
check "running 2-GPU job has consumed ML units" "$PY" -c 'import json,sys; u=json.loads(sys.argv[1])["trainingOutput"]["consumedMLUnits"]; sys.exit(not 0 < u < 1)' "$BODY"
# a running job's units grow between two reads with no write to the job in
# between (a cached render once froze them)
units1=$(printf '%s' "$BODY" | jget trainingOutput.consumedMLUnits)
sleep 0.5
api GET /v1/projects/p1/jobs/gpu_job
check "consumedMLUnits grows while the job runs" "$PY" -c 'import json,sys; sys.exit(not json.loads(sys.argv[1])["trainingOutput"]["consumedMLUnits"] > float(sys.argv[2]))' "$BODY" "$units1"
api GET /v1/projects/p1/jobs/ok_job:metrics
check_eq "history: 2 chief reports" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["points"]))')" 2
api GET /v1/projects/p1/jobs/bad_job
check_eq "replica exit code recorded" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.exitCode)" 3

# a drain: the running GPU job is requeued (a restart by drain), the node cordoned
api POST /v1/nodes/gpu-a:drain '{}'
check_eq "drain accepted" "$STATUS" 200
check "gpu_job requeued by the drain" wait_state gpu_job QUEUED 20
curl -s -m 10 -o "$T/metrics2" "$URL/metrics"
m2() { grep -E "^$1 " "$T/metrics2" | awk '{print $2}'; }
check_eq "restart by drain" "$(m2 'kiln_restarts_total\{reason="drain"\}')" 1
check_eq "node cordoned" "$(m2 'kiln_node_cordoned\{node="gpu-a"\}')" 1
check_eq "cordoned: nothing allocatable" "$(m2 'kiln_accelerators_allocatable\{node="gpu-a",type="NVIDIA_TESLA_V100"\}')" 0
check_eq "drained: nothing allocated" "$(m2 'kiln_accelerators_allocated\{node="gpu-a",type="NVIDIA_TESLA_V100"\}')" 0
check_eq "queue length 2" "$(m2 kiln_queue_length)" 2
check "no training gauges for a job no longer running" \
    test -z "$(m2 'kiln_job_training_loss\{project="p1",job="gpu_job"\}')"
check "promtool again" promtool check metrics <"$T/metrics2"
api GET /v1/projects/p1/jobs/gpu_job
check_eq "requeued job keeps its last report" "$(printf '%s' "$BODY" | jget trainingOutput.metrics.loss)" 0.5
check_eq "requeued job has no replicas" "$(printf '%s' "$BODY" | jget kilnStatus.replicas)" ""

# a tokens file: /metrics names every project's jobs, so only a '*' token reads it
printf 'all-projects-token-0001 * viewer\np1-project-token-00001 p1 editor\n' >"$T/tokens"
chmod 600 "$T/tokens"
start_kilnd "$T/d2" --tokens "$T/tokens"
check_eq "no token: 401" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/metrics")" 401
check_eq "project token: 403" "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer p1-project-token-00001' "$URL/metrics")" 403
check_eq "'*' token: 200" "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer all-projects-token-0001' "$URL/metrics")" 200
finish

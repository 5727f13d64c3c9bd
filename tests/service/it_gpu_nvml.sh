#!/bin/bash
# tests/service/it_gpu_nvml.sh - kilnd on "real" GPUs without a GPU: the
# stand-in NVML (tests/nvml/fake_nvml.c) plays a machine with two H100s and
# one A100 in MIG mode, and the test changes them under kilnd:
#   - discovery: Vertex AI's names, the same in `kiln nodes list` and `kiln
#     catalog list accelerators`; the MIG GPU refused with its reason;
#   - exclusive placement by UUID: two one-GPU jobs get the two H100s, each
#     its own UUID as CUDA_VISIBLE_DEVICES (and NVIDIA_VISIBLE_DEVICES), a
#     third waits; a TFJob's nvidia.com/gpu: 1 gets an H100 and says so;
#   - an Xid 79 under a running job: the GPU leaves service at once, the job
#     (restartPolicy OnFailure) is queued again with a reason naming the GPU
#     and the Xid, and runs on the other H100; nodes describe and /metrics
#     show the Xid; `kiln nodes uncordon NODE --gpu N` brings the GPU back;
#   - a kilnd restart with NVML listing the GPUs in the other order claims
#     the same GPUs by UUID;
#   - /metrics (DCGM exporter's series with hpc_job) through promtool.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need promtool
. "$(dirname "$0")/gpu_lib.sh"

U2=GPU-33333333-0000-4000-8000-000000000000
gpus() { # gpus FIRST SECOND: the two H100s in NVML's order, and the MIG A100
    { echo "0.name=NVIDIA H100 80GB HBM3"; echo "0.uuid=$1"
      echo "1.name=NVIDIA H100 80GB HBM3"; echo "1.uuid=$2"
      echo "2.name=NVIDIA A100-SXM4-80GB"; echo "2.uuid=$U2"; echo "2.mig=1"; } >"$T/state.new"
    mv "$T/state.new" "$T/state"
}
gpus "$U0" "$U1"
start_kilnd "$T/d" --nvml-library "$LIB"

# ---- discovery ----
check "kilnd says what it found" grep -q "3 GPUs through $LIB" "$T/d/kilnd.err"
api GET /v1/nodes
check_eq "H100s by Vertex AI's name" "$(printf '%s' "$BODY" | jget nodes.0.capacity.NVIDIA_H100_80GB)" 2
check_eq "A100 80GB by Vertex AI's name" "$(printf '%s' "$BODY" | jget nodes.0.capacity.NVIDIA_A100_80GB)" 1
check_eq "the MIG GPU is not allocatable" "$(printf '%s' "$BODY" | jget nodes.0.allocatable.NVIDIA_A100_80GB)" 0
check_eq "MIG refused" "$(printf '%s' "$BODY" | jget nodes.0.devices.2.health)" REFUSED
check "MIG reason" grep -q "MIG mode is enabled" <<<"$(printf '%s' "$BODY" | jget nodes.0.devices.2.reason)"
check_eq "not simulated" "$(printf '%s' "$BODY" | jget nodes.0.simulatedAccelerators)" false
check_eq "uuid" "$(printf '%s' "$BODY" | jget nodes.0.devices.1.uuid)" "$U1"
cat_names=$("$BUILD/bin/kiln" catalog list accelerators --format json | "$PY" -c 'import json,sys; print(" ".join(a["name"] for a in json.load(sys.stdin)))' 2>/dev/null)
for t in NVIDIA_H100_80GB NVIDIA_A100_80GB; do
    check "kiln catalog list accelerators names $t" grep -qw "$t" <<<"$cat_names"
    check "kiln nodes list names $t" grep -q "$t" <<<"$("$KILN" nodes list)"
done

# ---- exclusive placement by UUID ----
api POST /v1/projects/p1/jobs "$(gjob ex_a 1 NVIDIA_H100_80GB 'echo CVD=$CUDA_VISIBLE_DEVICES NVD=$NVIDIA_VISIBLE_DEVICES; sleep 30')"
check_eq "ex_a accepted (an H100 on n1-standard-4: this node's own GPU)" "$STATUS" 200
api POST /v1/projects/p1/jobs "$(gjob ex_b 1 "" 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 30')"
check_eq "ex_b accepted (a count without a type)" "$STATUS" 200
check "ex_a runs" wait_state ex_a RUNNING 10
check "ex_b runs" wait_state ex_b RUNNING 10
api POST /v1/projects/p1/jobs "$(gjob ex_c 1 NVIDIA_H100_80GB 'sleep 30')"
sleep 0.5
check_eq "a third one-GPU job waits (the A100 is MIG, refused)" "$(job_state ex_c)" QUEUED
api GET /v1/projects/p1/jobs/ex_a
ua=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)
api GET /v1/projects/p1/jobs/ex_b
ub=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)
check_eq "ex_b got an H100" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuType)" NVIDIA_H100_80GB
check "two different GPUs ($ua, $ub)" test -n "$ua" -a -n "$ub" -a "$ua" != "$ub"
check "ex_a sees its GPU by UUID" wait_file "$T/d/jobs/p1/ex_a/log.tsv" "CVD=$ua NVD=$ua\$"
check "ex_b sees its GPU by UUID" wait_file "$T/d/jobs/p1/ex_b/log.tsv" "CVD=$ub\$"
api POST /v1/projects/p1/jobs/ex_c:cancel '{}'
check "ex_c cancelled" wait_state ex_c CANCELLED 10

# ---- /metrics: DCGM exporter's names and labels, through promtool ----
sleep 1.2 # a sample round with the jobs on their GPUs
curl -s -m 10 "$URL/metrics" >"$T/metrics"
check "DCGM_FI_DEV_GPU_UTIL with hpc_job p1/ex_a" grep -q "^DCGM_FI_DEV_GPU_UTIL{gpu=\"[01]\",UUID=\"$ua\",device=\"nvidia[01]\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"$NODE\",hpc_job=\"p1/ex_a\"} 0" "$T/metrics"
for m in FB_USED FB_FREE GPU_TEMP POWER_USAGE TOTAL_ENERGY_CONSUMPTION XID_ERRORS; do
    check "DCGM_FI_DEV_$m" grep -q "^DCGM_FI_DEV_$m{.*UUID=\"$ub\".*hpc_job=\"p1/ex_b\"" "$T/metrics"
done
check "the MIG GPU is out of service" grep -q "^kiln_gpu_in_service{.*UUID=\"$U2\".*reason=\"MIG mode" "$T/metrics"
# dcgm-exporter's own label modelName is camelCase, which promtool's lint
# names (exit 3, the exposition parsed); anything else fails
promtool check metrics <"$T/metrics" >"$T/promtool.out" 2>&1
prc=$?
others=$(grep -v "label names should be written in 'snake_case' not 'camelCase'" "$T/promtool.out" | grep -v '^$')
check "promtool: parsed, only dcgm-exporter's camelCase label named (rc $prc: $others)" \
    test "$prc" = 0 -o \( "$prc" = 3 -a -z "$others" \)
check "promtool names the DCGM series' label" grep -q "^DCGM_FI_DEV_GPU_UTIL label names" "$T/promtool.out"
# the dashboard's charts: each GPU's samples over time (GET NODE:gpuHistory)
printf '0.util=71\n0.fbused=2048\n' | add_state
sleep 1.5
api GET "/v1/nodes/$NODE:gpuHistory"
check_eq "gpuHistory: one series per GPU" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["gpus"]))')" 3
last=$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; g=json.load(sys.stdin)["gpus"][0]; p=g["points"][-1]; print(g["uuid"], int(p[1]), round(p[2], 1), len(g["points"]) >= 2)')
check_eq "gpuHistory: the newest sample of GPU 0 (util %, memory GiB)" "$last" "$U0 71 2.0 True"
api POST /v1/projects/p1/jobs/ex_a:cancel '{}'
api POST /v1/projects/p1/jobs/ex_b:cancel '{}'
check "ex_a cancelled" wait_state ex_a CANCELLED 10
check "ex_b cancelled" wait_state ex_b CANCELLED 10

# ---- a TFJob's nvidia.com/gpu: 1 (no model) runs on an H100 ----
cat >"$T/tf.yaml" <<'EOF'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: tfgpu}
spec:
  tfReplicaSpecs:
    Chief:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: tensorflow
            image: unused
            command: ["sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES; sleep 30"]
            resources: {limits: {nvidia.com/gpu: 1}}
          nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
EOF
# kiln runs a TFJob's image through podman; with containerCommand set as a
# plain process instead (the job's JSON), the placement is what is tested
"$KILN" validate --kubeflow-job "$T/tf.yaml" --format json >"$T/tf.json" 2>"$T/tf.err"
check_eq "TFJob nvidia.com/gpu: 1 validates" "$?" 0
check "no K80 in it" test -z "$(grep -i k80 "$T/tf.json")"
"$PY" - "$T/tf.json" >"$T/tfproc.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
m = j["trainingInput"]["masterConfig"]
m.pop("imageUri", None)
m["containerCommand"] = ["sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES; sleep 30"]
m.pop("containerArgs", None)
j["jobId"] = "tfgpu"
print(json.dumps(j))
EOF
api POST /v1/projects/p1/jobs "$(cat "$T/tfproc.json")"
check_eq "TFJob-shaped job accepted" "$STATUS" 200
check "tfgpu runs" wait_state tfgpu RUNNING 10
api GET /v1/projects/p1/jobs/tfgpu
check_eq "kiln jobs describe: the model it got" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuType)" NVIDIA_H100_80GB
check "describe shows it" grep -q "gpuType: NVIDIA_H100_80GB" <<<"$("$KILN" jobs describe tfgpu)"
tu=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)
ti=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpus.0)
other=$U0
[ "$tu" = "$U0" ] && other=$U1

# ---- an Xid 79 under it: out at once, requeued, on the other GPU ----
echo "xid=$ti:79" | add_state
for _ in $(seq 1 100); do
    api GET /v1/projects/p1/jobs/tfgpu
    [ "$(printf '%s' "$BODY" | jget kilnStatus.failures)" = 1 ] &&
        [ "$(printf '%s' "$BODY" | jget state)" = RUNNING ] && break
    sleep 0.1
done
check_eq "requeued and running again" "$(printf '%s' "$BODY" | jget state)" RUNNING
check_eq "counted as a failure" "$(printf '%s' "$BODY" | jget kilnStatus.failures)" 1
check_eq "now on the other H100" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)" "$other"
check "the reason names the GPU and the Xid" grep -q "GPU $ti ($tu, NVIDIA H100 80GB HBM3) of node $NODE failed: Xid 79: GPU has fallen off the bus under the master-replica-0 replica; the job is queued again" "$T/d/jobs/p1/tfgpu/log.tsv"
api GET "/v1/nodes/$NODE"
check_eq "nodes describe: FAILED" "$(printf '%s' "$BODY" | jget "devices.$ti.health")" FAILED
check_eq "with the Xid" "$(printf '%s' "$BODY" | jget "devices.$ti.lastXid")" 79
check_eq "and its meaning" "$(printf '%s' "$BODY" | jget "devices.$ti.xidMeaning")" "GPU has fallen off the bus"
check_eq "not allocatable" "$(printf '%s' "$BODY" | jget allocatable.NVIDIA_H100_80GB)" 0
curl -s -m 10 "$URL/metrics" >"$T/metrics2"
check "/metrics: XID 79" grep -q "^DCGM_FI_DEV_XID_ERRORS{gpu=\"$ti\",UUID=\"$tu\".*} 79" "$T/metrics2"
check "/metrics: out of service with the Xid" grep -q "^kiln_gpu_in_service{gpu=\"$ti\",.*reason=\"Xid 79: GPU has fallen off the bus\"} 0" "$T/metrics2"
check "/metrics: restart counted as gpu_failure" grep -q '^kiln_restarts_total{reason="gpu_failure"} 1' "$T/metrics2"
api POST /v1/projects/p1/jobs "$(gjob waits 1 NVIDIA_H100_80GB 'sleep 30')"
sleep 0.5
check_eq "the failed GPU is not handed out" "$(job_state waits)" QUEUED
"$KILN" nodes uncordon "$NODE" --gpu "$ti" >/dev/null 2>"$T/unc.err"
check "kiln nodes uncordon --gpu" grep -q "GPU $ti of node \[$NODE\] back in service" "$T/unc.err"
check "the waiting job gets it" wait_state waits RUNNING 10
api GET /v1/projects/p1/jobs/waits
check_eq "on the GPU that came back" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)" "$tu"
api POST "/v1/nodes/$NODE/gpus/2:uncordon" '{}'
check_eq "a MIG GPU stays refused" "$STATUS" 409

# ---- a kilnd restart: NVML lists the GPUs the other way round; the jobs
#      keep their GPUs by UUID ----
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
gpus "$U1" "$U0"
start_kilnd "$T/d" --nvml-library "$LIB"
check "tfgpu adopted" wait_state tfgpu RUNNING 10
api GET /v1/projects/p1/jobs/tfgpu
check_eq "tfgpu keeps its GPU" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)" "$other"
api GET "/v1/nodes/$NODE"
held=$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(" ".join(sorted(d["uuid"]+"="+d.get("job","-") for d in json.load(sys.stdin)["devices"])))')
check_eq "both H100s held by their jobs, by UUID" "$held" \
    "$U0=projects/p1/jobs/$([ "$other" = "$U0" ] && echo tfgpu || echo waits) $U1=projects/p1/jobs/$([ "$other" = "$U1" ] && echo tfgpu || echo waits) $U2=-"
api POST /v1/projects/p1/jobs "$(gjob after 1 NVIDIA_H100_80GB 'sleep 30')"
sleep 0.5
check_eq "no GPU handed out twice after the restart" "$(job_state after)" QUEUED
for j in tfgpu waits after; do api POST "/v1/projects/p1/jobs/$j:cancel" '{}'; done
check "cancelled" wait_state tfgpu CANCELLED 10
api GET /v1/projects/p1/jobs/tfgpu
check "trainingOutput: GPU-hours" test -n "$(printf '%s' "$BODY" | jget trainingOutput.gpuHours)"
finish

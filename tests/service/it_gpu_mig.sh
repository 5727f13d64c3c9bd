#!/bin/bash
# tests/service/it_gpu_mig.sh - MIG instances as devices of their own, with
# the stand-in NVML (tests/nvml/fake_nvml.c): a machine with one H100 whole
# and one H100 in MIG mode that a site cut into 1g.10gb, 1g.10gb and 3g.40gb
# (slot 2 empty). Checks that
#   - each instance is listed with its profile, UUID, parent and memory, the
#     parent refused whole with a reason naming its instances, capacity by
#     kiln's type and by the device plugin's nvidia.com/mig-1g.10gb;
#   - a job asking for NVIDIA_MIG_1G_10GB and one asking for
#     nvidia.com/mig-1g.10gb each get an instance, its MIG UUID as
#     CUDA_VISIBLE_DEVICES; a third waits; a count without a model gets the
#     whole H100, never an instance; a profile the node lacks is refused at
#     submit;
#   - /metrics labels instances as dcgm-exporter does (GPU_I_PROFILE,
#     GPU_I_ID, the parent's gpu and UUID) with hpc_job;
#   - an Xid 79 on the parent takes every instance out, with the reason;
#     kiln nodes uncordon NODE --gpu PARENT brings them back and the waiting
#     job runs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_lib.sh"

M0=MIG-aaaaaaaa-0000-4000-8000-000000000000
M1=MIG-bbbbbbbb-0000-4000-8000-000000000000
M3=MIG-dddddddd-0000-4000-8000-000000000000
cat >"$T/state" <<EOF
0.name=NVIDIA H100 80GB HBM3
0.uuid=$U0
1.name=NVIDIA H100 80GB HBM3
1.uuid=$U1
1.mig=1
1.mig.devices=1g.10gb,1g.10gb,2g.20gb,3g.40gb
1.mig.0.uuid=$M0
1.mig.1.uuid=$M1
1.mig.2.empty=1
1.mig.3.uuid=$M3
1.mig.0.fbused=1024
EOF
start_kilnd "$T/d" --nvml-library "$LIB"

# ---- discovery ----
api GET "/v1/nodes/$NODE"
N=$BODY
check_eq "5 devices: 2 GPUs and 3 MIG instances (slot 2 empty)" "$(printf '%s' "$N" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["devices"]))')" 5
check_eq "the whole H100" "$(j capacity.NVIDIA_H100_80GB)" 2
check_eq "only one H100 allocatable: the other is in MIG mode" "$(j allocatable.NVIDIA_H100_80GB)" 1
check_eq "the MIG GPU refused whole" "$(j devices.1.health)" REFUSED
check "its reason names its instances" grep -q "MIG mode is enabled: its 3 MIG instances are handed out instead (devices 2 to 4)" <<<"$(j devices.1.reason)"
check_eq "capacity by kiln's type" "$(j capacity.NVIDIA_MIG_1G_10GB)" 2
check_eq "capacity by the device plugin's name" "$(printf '%s' "$N" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["capacity"]["nvidia.com/mig-1g.10gb"])')" 2
check_eq "3g.40gb" "$(j capacity.NVIDIA_MIG_3G_40GB)" 1
check_eq "no 2g.20gb (its slot is empty)" "$(j capacity.NVIDIA_MIG_2G_20GB)" ""
check_eq "instance 2: its profile" "$(j devices.2.migProfile)" 1g.10gb
check_eq "instance 2: its own UUID" "$(j devices.2.uuid)" "$M0"
check_eq "instance 2: its parent" "$(j devices.2.parentUuid) $(j devices.2.parentIndex)" "$U1 1"
check_eq "instance 2: its memory (GiB)" "$(j devices.2.memoryGb)" 10.0
check_eq "instance 2: the device plugin's resource" "$(j devices.2.resource)" nvidia.com/mig-1g.10gb
check_eq "instance 2: GPU instance id" "$(j devices.2.gpuInstanceId)" 1
check_eq "instance 4: 3g.40gb" "$(j devices.4.type) $(j devices.4.uuid)" "NVIDIA_MIG_3G_40GB $M3"
"$KILN" nodes describe "$NODE" >"$T/describe" 2>&1
check "kiln nodes describe shows the profile" grep -q "migProfile: .\?1g.10gb" "$T/describe"
check "kilnd's log lists the instances" grep -q "2 NVIDIA_MIG_1G_10GB" "$T/d/kilnd.err"

# ---- placement ----
api POST /v1/projects/p1/jobs "$(gjob mig_a 1 NVIDIA_MIG_1G_10GB 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 30' OnFailure)"
check_eq "mig_a accepted (kiln's type)" "$STATUS" 200
check "mig_a runs" wait_state mig_a RUNNING 10
api POST /v1/projects/p1/jobs "$(gjob mig_b 1 nvidia.com/mig-1g.10gb 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 30' OnFailure)"
check_eq "mig_b accepted (the device plugin's name)" "$STATUS" 200
check "mig_b runs" wait_state mig_b RUNNING 10
api GET /v1/projects/p1/jobs/mig_a
ua=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)
api GET /v1/projects/p1/jobs/mig_b
ub=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)
check_eq "the two 1g.10gb instances, one each" "$(printf '%s\n' "$ua" "$ub" | sort | tr '\n' ' ')" "$M0 $M1 "
check "mig_a sees its instance by MIG UUID" wait_file "$T/d/jobs/p1/mig_a/log.tsv" "CVD=$ua\$"
check "mig_b sees its instance by MIG UUID" wait_file "$T/d/jobs/p1/mig_b/log.tsv" "CVD=$ub\$"
api POST /v1/projects/p1/jobs "$(gjob mig_c 1 nvidia.com/mig-1g.10gb 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 30')"
sleep 0.5
check_eq "a third 1g.10gb job waits" "$(job_state mig_c)" QUEUED
api POST /v1/projects/p1/jobs "$(gjob whole 1 "" 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 30')"
check "a count without a model runs" wait_state whole RUNNING 10
api GET /v1/projects/p1/jobs/whole
check_eq "on the whole H100, not an instance" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)" "$U0"
api POST /v1/projects/p1/jobs "$(gjob nope 1 nvidia.com/mig-2g.20gb 'true')"
check_eq "a profile this node lacks is refused at submit" "$STATUS" 400
check "naming it" grep -q "nvidia.com/mig-2g.20gb" <<<"$BODY"

# ---- /metrics ----
sleep 1.2
curl -s -m 10 "$URL/metrics" >"$T/metrics"
ia=$( [ "$ua" = "$M0" ] && echo 1 || echo 2 )
pa=$( [ "$ua" = "$M0" ] && echo 1g.10gb || echo 1g.10gb )
check "FB_USED of an instance, labelled as dcgm-exporter does" grep -q "^DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"$U1\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"$NODE\",GPU_I_PROFILE=\"$pa\",GPU_I_ID=\"$ia\",hpc_job=\"p1/mig_a\"} " "$T/metrics"
check "instance 1 uses 1024 MiB" grep -q "^DCGM_FI_DEV_FB_USED{.*GPU_I_ID=\"1\".*} 1024" "$T/metrics"
check "the 3g.40gb in service" grep -q "^kiln_gpu_in_service{.*GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"4\"} 1" "$T/metrics"

# ---- an Xid on the parent takes its instances out ----
echo "xid=1:79" | add_state
wait_device 4 FAILED
for i in 2 3 4; do
    check_eq "instance $i FAILED" "$(j devices.$i.health)" FAILED
done
check "the reason names the parent and the Xid" grep -q "its GPU ($U1) is out of service: Xid 79: GPU has fallen off the bus" <<<"$(j devices.4.reason)"
check_eq "no 1g.10gb allocatable" "$(j allocatable.NVIDIA_MIG_1G_10GB)" 0
check_eq "the whole H100 untouched" "$(j devices.0.health)" OK
check "mig_a leaves its instance (requeued)" wait_file "$T/d/jobs/p1/mig_a/log.tsv" "of node $NODE failed: its GPU ($U1) is out of service"
curl -s -m 10 "$URL/metrics" >"$T/metrics2"
check "/metrics: the instance out of service with the reason" grep -q "^kiln_gpu_in_service{.*GPU_I_ID=\"4\",reason=\"its GPU ($U1) is out of service: Xid 79" "$T/metrics2"
sleep 0.5
check_eq "mig_c still waits" "$(job_state mig_c)" QUEUED
# mig_a and mig_b were requeued too, and are older than mig_c: once their
# restart backoff has passed (a loaded machine) both would take the two
# 1g.10gb instances back first. With mig_b gone one is mig_c's whatever the
# timing
api POST /v1/projects/p1/jobs/mig_b:cancel '{}'
check "mig_b cancelled" wait_state mig_b CANCELLED 10
"$KILN" nodes uncordon "$NODE" --gpu 1 >/dev/null 2>"$T/unc.err"
check "kiln nodes uncordon NODE --gpu 1 (the MIG GPU)" grep -q "GPU 1 of node \[$NODE\] back in service" "$T/unc.err"
wait_device 4 OK
check_eq "its instances back in service" "$(j devices.2.health) $(j devices.3.health) $(j devices.4.health)" "OK OK OK"
check_eq "the parent still refused whole" "$(j devices.1.health)" REFUSED
check "the waiting job gets an instance" wait_state mig_c RUNNING 10
for x in mig_a mig_b mig_c whole; do api POST "/v1/projects/p1/jobs/$x:cancel" '{}'; done
check "cancelled" wait_state mig_c CANCELLED 10

# ---- a TFJob's nvidia.com/mig-3g.40gb: 1 (the device plugin's mixed strategy) ----
tfjob() { # tfjob LIMITS
    cat <<EOF
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: tfmig}
spec:
  tfReplicaSpecs:
    Chief:
      replicas: 1
      template:
        spec:
          containers:
          - name: tensorflow
            image: unused
            command: ["true"]
            resources: {limits: {$1}}
EOF
}
# kiln validate checks against the built-in catalog, which has no site GPUs:
# the MIG resource is read as the accelerator type and named (kilnd's own
# catalog has it: mig_b above asked for it by this name)
tfjob '"nvidia.com/mig-3g.40gb": 1' >"$T/tf.yaml"
"$KILN" validate --kubeflow-job "$T/tf.yaml" >"$T/tf.out" 2>&1
check_eq "offline, a site's MIG type is unknown" "$?" 2
check "read as the accelerator type" grep -q "acceleratorConfig.type: unknown accelerator type 'nvidia.com/mig-3g.40gb'" "$T/tf.out"
tfjob '"nvidia.com/mig-3g.40gb": 1, "nvidia.com/gpu": 1' >"$T/tf2.yaml"
"$KILN" validate --kubeflow-job "$T/tf2.yaml" >"$T/tf2.out" 2>&1
check_eq "a MIG resource and nvidia.com/gpu together: refused" "$?" 2
check "at its path" grep -q 'resources.limits\["nvidia.com/mig-3g.40gb"\]: a container asks for one kind of GPU' "$T/tf2.out"
tfjob '"nvidia.com/mig-3g.40gb": 0' >"$T/tf3.yaml"
"$KILN" validate --kubeflow-job "$T/tf3.yaml" >"$T/tf3.out" 2>&1
check_eq "0 MIG instances: refused" "$?" 2
check "saying so" grep -q "at least 1" "$T/tf3.out"
finish

#!/bin/bash
# tests/service/it_gpu_topology.sh - NVLink-aware GPU choice with the
# stand-in NVML (tests/nvml/fake_nvml.c): four H100s, 0-1 and 2-3 NVLinked
# pairs (NV4), the pairs on different NUMA nodes. Checks that
#   - `kiln nodes describe NODE --topology` prints the matrix as
#     `nvidia-smi topo -m` does (NV#, PIX/PXB/PHB/NODE/SYS, NUMA affinity);
#   - with GPU 0 held, a replica asking for 2 GPUs gets the free NVLinked
#     pair 2-3, not 1 and 2 (the lowest free, across NUMA nodes).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_lib.sh"

cat >"$T/state" <<'EOF'
0.name=NVIDIA H100 80GB HBM3
1.name=NVIDIA H100 80GB HBM3
2.name=NVIDIA H100 80GB HBM3
3.name=NVIDIA H100 80GB HBM3
nvlink.0.1=4
nvlink.2.3=4
topo.0.1=PIX
topo.2.3=PIX
topo.0.2=SYS
topo.0.3=SYS
topo.1.2=SYS
topo.1.3=SYS
0.numa=0
1.numa=0
2.numa=1
3.numa=1
EOF
start_kilnd "$T/d" --nvml-library "$LIB"

"$KILN" nodes describe "$NODE" --topology >"$T/topo" 2>"$T/topo.err"
check_eq "describe --topology exits 0 ($(cat "$T/topo.err"))" "$?" 0
printf '\tGPU0\tGPU1\tGPU2\tGPU3\tNUMA Affinity\nGPU0\t X \tNV4\tSYS\tSYS\t0\nGPU1\tNV4\t X \tSYS\tSYS\t0\nGPU2\tSYS\tSYS\t X \tNV4\t1\nGPU3\tSYS\tSYS\tNV4\t X \t1\n' >"$T/want"
check "the matrix as nvidia-smi topo -m prints it" diff <(head -5 "$T/topo") "$T/want"
check "with nvidia-smi's legend" grep -q "NV#  = Connection traversing a bonded set of # NVLinks" "$T/topo"
api GET "/v1/nodes/$NODE"
check_eq "the API's matrix" "$(printf '%s' "$BODY" | jget topology.matrix.2.3)" NV4

api POST /v1/projects/p1/jobs "$(gjob one 1 NVIDIA_H100_80GB 'sleep 30' "" n1-standard-16)"
check_eq "one accepted" "$STATUS" 200
check "one runs" wait_state one RUNNING 10
api GET /v1/projects/p1/jobs/one
check_eq "one has GPU 0" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpus.0)" 0
api POST /v1/projects/p1/jobs "$(gjob pair 2 NVIDIA_H100_80GB 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 30' "" n1-standard-16)"
check_eq "pair accepted ($BODY)" "$STATUS" 200
check "pair runs" wait_state pair RUNNING 10
api GET /v1/projects/p1/jobs/pair
check_eq "pair gets the NVLinked GPUs 2 and 3, not 1 and 2" \
    "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpus.0) $(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpus.1)" "2 3"
check "and sees them" wait_file "$T/d/jobs/p1/pair/log.tsv" "CVD=GPU-FAKE-2,GPU-FAKE-3\$"
for j in one pair; do api POST "/v1/projects/p1/jobs/$j:cancel" '{}'; done
check "cancelled" wait_state pair CANCELLED 10
finish

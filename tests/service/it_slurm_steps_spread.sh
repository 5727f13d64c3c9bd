#!/bin/bash
# tests/service/it_slurm_steps_spread.sh - kilnd --executor slurm
# --slurm-launch steps on a three-node test cluster (n1, n2, n3: 2 fake T4
# each): a master with 1 T4 and three workers with 1 T4 each. Slurm gives a
# heterogeneous job's components no node in common, so the master has a
# node of its own and the workers' component spans the other two (two
# tasks on one, one on the other). squeue's row cannot say which node holds
# how many of a spanning component's tasks: kilnd reads where they went from
# the allocation's batch script (its layout file), and each worker runs on
# the node and the GPU Slurm gave its task:
#   - the job's event says its nodes came from the batch script's layout;
#   - the master alone on its node; the workers on the two others, two on
#     one of them with different GPUs; SUCCEEDED; one allocation.
# (it_slurm_steps, on two nodes, has every component on one node: there the
# nodes come from squeue.) Skipped (77) where Slurm cannot run here.
PORT_RANGE=19000-19799 # the cluster's own daemons listen on 19900-19992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod # the cluster's fake GPUs are device nodes
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
KILN_SLURM_NODES=3 slurm_test_cluster 19900 19992

start_kilnd "$T/d" --executor slurm --slurm-launch steps --slurm-partition kiln \
    --slurm-gpu-type NVIDIA_TESLA_T4=t4 --kiln-train "$BUILD/bin/kiln-train"

"$KILN" nodes list >"$T/nodes" 2>&1
check "nodes list shows n3" grep -q '^n3 ' "$T/nodes"

prog='echo "ME $KILN_TASK_NAME node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES"; sleep 1'
cmd=$(printf '%s' "$prog" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"sp1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"3","workerConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c",%s]}}}' "$cmd" "$cmd")"
check_eq "sp1 created" "$STATUS" 200
check "sp1 SUCCEEDED" wait_state sp1 SUCCEEDED 90
L=$T/d/jobs/p1/sp1/log.tsv
check "its nodes from the batch script's layout (the workers span two nodes)" \
    grep -q 'runs (.*its nodes from its batch script' "$L"
m=$(grep -o 'ME master-replica-0 node=[^ ]*' "$L" | sed 's/.*node=//')
w=$(grep -o 'ME worker-replica-[0-2] node=[^ ]* cvd=[^ ]*' "$L" | sed 's/.*node=//' | sort)
check_eq "three workers ran" "$(printf '%s\n' "$w" | grep -c .)" 3
check "no worker on the master's node ($m)" test -n "$m" -a "$(printf '%s\n' "$w" | grep -c "^$m ")" = 0
check_eq "the workers on two nodes" "$(printf '%s\n' "$w" | cut -d' ' -f1 | sort -u | wc -l)" 2
check "two workers on one node hold different GPUs" \
    test "$(printf '%s\n' "$w" | sort -u | wc -l)" = 3
check_eq "one allocation" "$(ls "$T"/d/jobs/p1/sp1/slurm/kiln-p1-sp1/layout.* 2>/dev/null | wc -l)" 1
grep -q 'SUCCEEDED\|completed successfully' "$L" || tail -n 30 "$L" >&2

finish

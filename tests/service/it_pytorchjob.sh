#!/bin/bash
# tests/service/it_pytorchjob.sh - Kubeflow PyTorchJob files run on a real
# kilnd with Debian's python3-torch: a Master + 2 Workers job whose program
# calls init_process_group("gloo") from the environment all-reduces across
# the three ranks and SUCCEEDS. The containers name images that cannot be
# pulled here, so they carry a command (run as a plain process, as for TFJob).
# Skipped (77) where python3-torch is not installed.
. "$(dirname "$0")/lib.sh"
SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
if ! "$SYSPY" -c 'import torch.distributed' 2>/dev/null; then
    echo "SKIP: $SYSPY cannot import torch (apt install python3-torch)"
    exit 77
fi
HERE=$(cd "$(dirname "$0")" && pwd)
start_kilnd "$T/d" --python "$SYSPY"

# ---- Master + 2 Workers, gloo, from the environment ----
cat >"$T/gloo.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: pt-gloo
spec:
  runPolicy: {backoffLimit: 0}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              command: ["$SYSPY", "$HERE/pytorchjob/allreduce.py"]
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              command: ["$SYSPY", "$HERE/pytorchjob/allreduce.py"]
YAML
"$KILN" jobs submit training --kubeflow-job "$T/gloo.yaml" >"$T/submit.out" 2>&1
check_eq "PyTorchJob submitted" "$?" 0
check "PyTorchJob SUCCEEDED" wait_state pt_gloo SUCCEEDED 120
"$KILN" jobs stream-logs pt_gloo >"$T/gloo.logs" 2>&1
for r in 0 1 2; do
    check "rank $r all-reduced across 3" \
        grep -q "rank $r of 3: sum 6 (PET_NODE_RANK=$r PET_NNODES=3 PYTHONUNBUFFERED=1)" "$T/gloo.logs"
done
check "the unpulled image is said" grep -q "is not pulled" "$T/gloo.logs"

finish

#!/bin/bash
# tests/service/it_tf_mwms.sh - an unmodified TensorFlow MultiWorkerMirroredStrategy
# Keras script (examples/tf_mwms) runs as a kiln job with a chief and one
# worker: TensorFlow forms its 2-worker cluster from kiln's TF_CONFIG, trains
# with collective all-reduce, and the chief saves the model to the job dir.
# TensorFlow comes from the venv that scripts/bootstrap makes
# (${KILN_PYENV:-$HOME/.cache/kiln/tf-venv}); skipped (77) where it cannot be
# imported there.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need tensorflow
VENV=${KILN_PYENV:-$HOME/.cache/kiln/tf-venv}
TFPY=${KILN_TEST_TF_PYTHON:-$VENV/bin/python}
WAIT=${KILN_TF_WAIT:-240}
# gcloud's --package-path names the package directory itself
EX=$(cd "$(dirname "$0")/../../examples/tf_mwms/trainer" && pwd)
# a relative --data-dir, as with the embedded default ./var: the staged
# package must still be found from the replicas' work dirs
cd "$T" || exit 1
start_kilnd d --python "$TFPY"

# TF 2's MultiWorkerMirroredStrategy accepts "chief" but not "master" in the
# cluster: the master is the chief through useChiefInTfConfig, as on AI Platform
cat >"$T/config.yaml" <<'EOF2'
trainingInput:
  useChiefInTfConfig: true
EOF2
mkdir -p "$T/jobdir"
"$KILN" jobs submit training tf_mwms_1 --config "$T/config.yaml" \
    --package-path "$EX" --module-name trainer.task --job-dir "$T/jobdir" \
    --scale-tier custom --master-machine-type n1-standard-4 --worker-count 1 \
    --worker-machine-type n1-standard-4 --region us-central1 \
    -- --epochs 2 --steps 5 >"$T/submit" 2>&1
check_eq "submitted" "$?" 0 || cat "$T/submit" >&2
check "TF MWMS job SUCCEEDED" wait_state tf_mwms_1 SUCCEEDED "$WAIT"
timeout 30 "$KILN" jobs stream-logs tf_mwms_1 --task-name master-replica-0 >"$T/chief.log" 2>&1
timeout 30 "$KILN" jobs stream-logs tf_mwms_1 --task-name worker-replica-0 >"$T/worker.log" 2>&1
for r in chief worker; do
    check "$r: TF_CONFIG gives its task" grep -q "TF_CONFIG task: {'type': '$r', 'index': 0" "$T/$r.log"
    check "$r: num_replicas_in_sync == 2" grep -q "num_replicas_in_sync: 2" "$T/$r.log"
    check "$r: trained" grep -q "final loss:" "$T/$r.log"
done
check "chief saved the model to the job dir" test -f "$T/jobdir/model/saved_model.pb"
check "chief says where" grep -q "saved model to $T/jobdir/model" "$T/chief.log"
check "no worker leftovers in the job dir" test ! -e "$T/jobdir/workertemp_0"
if [ "$FAILS" -ne 0 ]; then
    echo "--- chief log (tail)" >&2
    tail -40 "$T/chief.log" >&2
    echo "--- worker log (tail)" >&2
    tail -20 "$T/worker.log" >&2
fi
finish

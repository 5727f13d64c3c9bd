#!/usr/bin/env bash
# it_tuning_mnist.sh - a 6-trial study of kiln.mnist (kiln-train), 2 trials at
# once, on a real kilnd: the learning rate arrives as kiln-train's own
# --learning_rate flag, each trial trains in its own directory under the job
# dir, and kiln-train's JSON events give every trial its finalMetric
# (test_accuracy, the tag given). Skipped (77) without kiln-train.
. "$(dirname "$0")/lib.sh"
if [ ! -x "$BUILD/bin/kiln-train" ]; then
    echo "SKIP: $BUILD/bin/kiln-train is not built (the training runtime)"
    exit 77
fi
start_kilnd "$T/d" --kiln-train "$BUILD/bin/kiln-train"

hp='{"goal":"MAXIMIZE","hyperparameterMetricTag":"test_accuracy","maxTrials":6,"maxParallelTrials":2,"params":[{"parameterName":"learning_rate","type":"DOUBLE","minValue":0.001,"maxValue":0.3,"scaleType":"UNIT_LOG_SCALE"}]}'
api POST /v1/projects/p1/jobs '{"jobId":"mnist_tune","trainingInput":{"scaleTier":"BASIC","region":"us-central1","pythonModule":"kiln.mnist","jobDir":"'"$T/jobdir"'","args":["--model=mlp","--train_epochs=1","--train_examples=1000","--threads=1"],"hyperparameters":'"$hp"'}}'
check_eq "create the study" "$STATUS" 200
check "the study SUCCEEDED" wait_state mnist_tune SUCCEEDED 240
api GET /v1/projects/p1/jobs/mnist_tune
printf '%s' "$BODY" >"$T/job.json"
out=$("$PY" - "$T/job.json" <<'PYEOF'
import json, sys
o = json.load(open(sys.argv[1]))["trainingOutput"]
t = o["trials"]
v = [float(x["finalMetric"]["objectiveValue"]) for x in t]
lrs = [float(x["hyperparameters"]["learning_rate"]) for x in t]
print(o["isHyperparameterTuningJob"], o["hyperparameterMetricTag"], o["completedTrialCount"],
      len(t), all(x["state"] == "SUCCEEDED" for x in t), v == sorted(v, reverse=True),
      all(0.0 < a <= 1.0 for a in v), all(0.001 <= lr <= 0.3 for lr in lrs),
      len(set(lrs)) == 6, sorted(int(x["trialId"]) for x in t))
PYEOF
)
check_eq "6 trials SUCCEEDED, best first, accuracies in (0,1], distinct rates in range" \
    "$out" "True test_accuracy 6 6 True True True True True [1, 2, 3, 4, 5, 6]"
# the rate reached kiln-train as its own flag: its start event echoes it
rate1=$("$PY" -c 'import json,sys; t=[x for x in json.load(open(sys.argv[1]))["trainingOutput"]["trials"] if x["trialId"]=="1"][0]; print(t["hyperparameters"]["learning_rate"])' "$T/job.json")
start1=$(grep -P '\ttrial-1-master-replica-0\t' "$T/d/jobs/p1/mnist_tune/log.tsv" | grep -o '"event":"start".*' | head -1)
check "trial 1's kiln-train got --learning_rate=$rate1" "$PY" -c '
import json, sys
e = json.loads("{" + sys.argv[1])
sys.exit(abs(e["learning_rate"] - float(sys.argv[2])) > 1e-6 * float(sys.argv[2]))' "$start1" "$rate1"
# at most 2 at once: the trials' start and end times never overlap by 3
check "never more than 2 trials at once" "$PY" -c '
import json, sys
t = json.load(open(sys.argv[1]))["trainingOutput"]["trials"]
ev = sorted([(x["startTime"], 1) for x in t] + [(x["endTime"], -1) for x in t], key=lambda e: (e[0], e[1]))
n = m = 0
for _, d in ev:
    n += d; m = max(m, n)
sys.exit(m > 2)' "$T/job.json"
for i in 1 6; do
    check "trial $i trained in its own directory (checkpoint under the job dir's $i/)" \
        bash -c "ls '$T/jobdir/$i/'ckpt-*.kiln >/dev/null 2>&1"
done
finish

#!/usr/bin/env bash
# it_tuning.sh - a tuning job on a real kilnd runs as trials: 4 trials, 2 at
# once, each with its flags, environment and directory, each reporting its
# metric through the cloudml-hypertune file; trainingOutput lists them.
. "$(dirname "$0")/lib.sh"

start_kilnd "$T/data"
# the trial's flags arrive as $0 $1 ... of sh -c; the metric is the lr itself
cmd='lr=${0#--lr=}; echo "{\"loss\": $lr, \"global_step\": \"7\"}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "$CLOUD_ML_TRIAL_ID $TF_CONFIG" >trial.txt; sleep 1'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":4,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1,"scaleType":"UNIT_LOG_SCALE"}]}'
api POST /v1/projects/p1/jobs "$(job_json tune1 "$cmd" "$hp")"
check_eq "create" "$STATUS" 200
check "the study succeeds" wait_state tune1 SUCCEEDED 40
api GET /v1/projects/p1/jobs/tune1
out=$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
o = json.load(sys.stdin)["trainingOutput"]
t = o["trials"]
v = [x["finalMetric"]["objectiveValue"] for x in t]
print(o["isHyperparameterTuningJob"], o["completedTrialCount"], len(t), v == sorted(v),
      all(x["finalMetric"]["trainingStep"] == "7" for x in t),
      sorted(x["trialId"] for x in t))')
check_eq "4 trials, best first, each with a finalMetric" "$out" "True 4 4 True True ['1', '2', '3', '4']"
check "trial 3 ran in its own directory with TF_CONFIG task.trial" \
    grep -q '^3 .*"trial":"3"' "$T/data/jobs/p1/tune1/3/trial.txt"
finish

#!/usr/bin/env bash
# it_tuning.sh - tuning jobs on a real kilnd run as trials: 4 trials, 2 at
# once, each with its flags, environment and directory, each reporting its
# metric through the cloudml-hypertune file; trainingOutput lists them.
# Then: GRID_SEARCH over a CATEGORICAL and an INTEGER param (every
# combination once, the last parameter fastest); the median early stopping
# rule on a study with bad trials, and ASHA (kiln's extension); cancel of a running study; kill -9 of
# kilnd mid-study and a restart on the same data dir.
. "$(dirname "$0")/lib.sh"

start_kilnd "$T/data"
# the trial's flags arrive as $0 $1 ... of sh -c; the metric is the lr itself
cmd='lr=${0#--lr=}; echo "{\"loss\": $lr, \"global_step\": \"7\"}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "$CLOUD_ML_TRIAL_ID $TF_CONFIG" >trial.txt; echo "hello from trial $CLOUD_ML_TRIAL_ID"; sleep 1'
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

# the CLI: describe shows the trials as a table, best first (the order of
# trainingOutput.trials); stream-logs --trial N shows trial N's lines only
best=$(printf '%s' "$BODY" | "$PY" -c 'import json, sys; print(" ".join(x["trialId"] for x in json.load(sys.stdin)["trainingOutput"]["trials"]))')
desc=$("$KILN" jobs describe tune1)
check "cli: describe has the trials table" grep -qE '^TRIAL +STATE +OBJECTIVE +STEP +HYPERPARAMETERS +EARLY_STOPPED$' <<<"$desc"
check_eq "cli: the table's rows best first" \
    "$(awk '/^TRIAL /{on=1; next} on && NF {print $1}' <<<"$desc" | tr '\n' ' ')" "$best "
check "cli: a row has state, objective, step, values, early-stopped" \
    grep -qE '^3 +SUCCEEDED +0\.0[0-9]+ +7 +lr=0\.0[0-9]+ +no$' <<<"$desc"
check_eq "cli: describe --format json is JSON only" \
    "$("$KILN" jobs describe tune1 --format json | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["trainingOutput"]["trials"]))')" 4
logs=$("$KILN" jobs stream-logs tune1 --trial 3)
check "cli: stream-logs --trial 3 shows trial 3's line" grep -q 'trial-3-master-replica-0.hello from trial 3$' <<<"$logs"
check_eq "cli: and no other task's" "$(cut -f3 <<<"$logs" | sort -u)" "trial-3-master-replica-0"
check_eq "cli: --trial with --task-name" \
    "$("$KILN" jobs stream-logs tune1 --trial 2 --task-name master-replica-0 | cut -f4)" "hello from trial 2"
"$KILN" jobs stream-logs tune1 --trial x >/dev/null 2>"$T/err"
check "cli: --trial x is refused" grep -q "trial id" "$T/err"

# resumePreviousJobId: tune2 continues tune1's study (maxTrials 6): its 4
# trials are kept, 2 more run, with ids 5 and 6; a job naming an unknown
# job, or with other params, is refused at create
hp6=${hp/\"maxTrials\":4/\"maxTrials\":6}
hp6=${hp6/\"params\"/\"resumePreviousJobId\":\"tune1\",\"params\"}
api POST /v1/projects/p1/jobs "$(job_json tune2 "$cmd" "$hp6")"
check_eq "resume: create" "$STATUS" 200
check "resume: the study succeeds" wait_state tune2 SUCCEEDED 40
api GET /v1/projects/p1/jobs/tune2
check_eq "resume: 6 trials, 1-4 tune1's, 5 and 6 new" "$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
o = json.load(sys.stdin)["trainingOutput"]
print(o["completedTrialCount"], sorted(int(x["trialId"]) for x in o["trials"]))')" "6 [1, 2, 3, 4, 5, 6]"
check "resume: trials 5 and 6 ran in tune2's directory, 1 did not" \
    test -s "$T/data/jobs/p1/tune2/5/trial.txt" -a -s "$T/data/jobs/p1/tune2/6/trial.txt" -a ! -e "$T/data/jobs/p1/tune2/1"
api POST /v1/projects/p1/jobs "$(job_json tune3 "$cmd" "${hp6/tune1/nosuch}")"
check_eq "resume: an unknown job is refused" "$STATUS" 400
check "resume: ... saying so" grep -q "nosuch.*not found" <<<"$BODY"
api POST /v1/projects/p1/jobs "$(job_json tune3 "$cmd" "${hp6/0.1,/0.5,}")"
check_eq "resume: other params are refused" "$STATUS" 400
check "resume: ... saying which" grep -q "resumePreviousJobId.*params\[0\] differs.*minValue/maxValue" <<<"$BODY"

W=$T/w
mkdir -p "$W"
out_of() { # out_of JOB PYTHON-EXPR-OF-o(trainingOutput)
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | "$PY" -c "
import json, sys
o = json.load(sys.stdin).get('trainingOutput', {})
t = sorted(o.get('trials', []), key=lambda x: int(x['trialId']))
print($2)"
}

# (a) GRID_SEARCH over a CATEGORICAL (3 values) and an INTEGER (2 values):
# every combination once, in order, the last parameter varying fastest
cmd='echo "$CLOUD_ML_TRIAL_ID $0 $*" >args.txt; echo "{\"acc\": 0.5}" >>"$CLOUD_ML_HP_METRIC_FILE"'
hp=',"hyperparameters":{"goal":"MAXIMIZE","hyperparameterMetricTag":"acc","algorithm":"GRID_SEARCH","maxTrials":6,"maxParallelTrials":3,"params":[{"parameterName":"opt","type":"CATEGORICAL","categoricalValues":["sgd","adam","rmsprop"]},{"parameterName":"layers","type":"INTEGER","minValue":1,"maxValue":2}]}'
api POST /v1/projects/p1/jobs "$(job_json grid1 "$cmd" "$hp")"
check_eq "grid: create" "$STATUS" 200
check "grid: the study succeeds" wait_state grid1 SUCCEEDED 20
check_eq "grid: 6 trials, each combination once, in order" \
    "$(out_of grid1 '[(x["trialId"], x["hyperparameters"]["opt"], x["hyperparameters"]["layers"], x["state"]) for x in t]')" \
    "[('1', 'sgd', '1', 'SUCCEEDED'), ('2', 'sgd', '2', 'SUCCEEDED'), ('3', 'adam', '1', 'SUCCEEDED'), ('4', 'adam', '2', 'SUCCEEDED'), ('5', 'rmsprop', '1', 'SUCCEEDED'), ('6', 'rmsprop', '2', 'SUCCEEDED')]"
check_eq "grid: trial 4 got its flags" "$(cat "$T/data/jobs/p1/grid1/4/args.txt" 2>&1)" "4 --opt=adam --layers=2"
check_eq "grid: no 7th trial" "$(ls -d "$T/data/jobs/p1/grid1/7" 2>/dev/null)" ""

# (b) early stopping: trials 1-3 (q=1..3) report loss q at steps 1..4 and
# succeed; trials 4 and 5 (q=4,5) report a worse loss and would run 30 s:
# the median rule stops them after their first report
cmd='q=${0#--q=}; for s in 1 2 3 4; do echo "{\"loss\": $q, \"global_step\": $s}" >>"$CLOUD_ML_HP_METRIC_FILE"; [ "$q" -gt 3 ] && sleep 10 || sleep 0.3; done'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","algorithm":"GRID_SEARCH","maxTrials":5,"maxParallelTrials":3,"enableTrialEarlyStopping":true,"params":[{"parameterName":"q","type":"INTEGER","minValue":1,"maxValue":5}]}'
api POST /v1/projects/p1/jobs "$(job_json early1 "$cmd" "$hp")"
check_eq "early: create" "$STATUS" 200
t0=$SECONDS
check "early: the study succeeds" wait_state early1 SUCCEEDED 20
check "early: well before the bad trials' 40 s" test $((SECONDS - t0)) -lt 15
check_eq "early: trials 4 and 5 stopped early, 1-3 not" \
    "$(out_of early1 '[(x["trialId"], x["state"], x["isTrialStoppedEarly"]) for x in t]')" \
    "[('1', 'SUCCEEDED', False), ('2', 'SUCCEEDED', False), ('3', 'SUCCEEDED', False), ('4', 'SUCCEEDED', True), ('5', 'SUCCEEDED', True)]"
check_eq "early: best first, objective = the last value" \
    "$(out_of early1 '[(x["trialId"], x["finalMetric"]["objectiveValue"], x["finalMetric"]["trainingStep"], len(x["allMetrics"])) for x in o["trials"][:3]]')" \
    "[('1', 1.0, '4', 4), ('2', 2.0, '4', 4), ('3', 3.0, '4', 4)]"

# (b2) ASHA (kiln's extension), eta 2, rungs at steps 1, 2, 4; one trial at
# a time, GRID over q=1..4, MINIMIZE: trial 1 reports loss 1 at each step and
# is never stopped; trial 2 reports 0.5 at step 1 (the best at rung 0: it
# goes on) and 4 at step 2 (worse than trial 1 at rung 1: stopped there);
# trials 3 and 4 report 3 and 4 at step 1 (not the best at rung 0: stopped).
# Bad trials would sleep 10 s after step 2.
cmd='q=${0#--q=}; for s in 1 2 3 4; do l=$((q * s)); [ "$q" = 1 ] && l=1; [ "$q" = 2 ] && [ $s = 1 ] && l=0.5; echo "{\"loss\": $l, \"global_step\": $s}" >>"$CLOUD_ML_HP_METRIC_FILE"; if [ "$q" = 1 ] || [ $s = 1 ]; then sleep 0.3; else sleep 10; fi; done'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","algorithm":"GRID_SEARCH","maxTrials":4,"maxParallelTrials":1,"enableTrialEarlyStopping":true,"earlyStoppingRule":"ASHA","ashaReductionFactor":2,"params":[{"parameterName":"q","type":"INTEGER","minValue":1,"maxValue":4}]}'
api POST /v1/projects/p1/jobs "$(job_json asha1 "$cmd" "$hp")"
check_eq "asha: create" "$STATUS" 200
t0=$SECONDS
check "asha: the study succeeds" wait_state asha1 SUCCEEDED 30
check "asha: well before the bad trials' 10 s sleeps" test $((SECONDS - t0)) -lt 20
check_eq "asha: trials 2-4 stopped early, the best (1) not" \
    "$(out_of asha1 '[(x["trialId"], x["state"], x["isTrialStoppedEarly"]) for x in t]')" \
    "[('1', 'SUCCEEDED', False), ('2', 'SUCCEEDED', True), ('3', 'SUCCEEDED', True), ('4', 'SUCCEEDED', True)]"
check_eq "asha: trial 1 ran all 4 steps, trial 2 was stopped at rung 1 (step 2)" \
    "$(out_of asha1 '[(x["trialId"], x["finalMetric"]["trainingStep"], len(x["allMetrics"])) for x in t[:2]]')" \
    "[('1', '4', 4), ('2', '2', 2)]"
bad_hp=${hp/\"enableTrialEarlyStopping\":true,/}
api POST /v1/projects/p1/jobs "$(job_json asha2 "$cmd" "$bad_hp")"
check_eq "asha: earlyStoppingRule without enableTrialEarlyStopping is refused" "$STATUS" 400
check "asha: ... at its field" grep -q 'hyperparameters.earlyStoppingRule' <<<"$BODY"
api POST /v1/projects/p1/jobs "$(job_json asha2 "$cmd" "${hp/\"ashaReductionFactor\":2/\"ashaReductionFactor\":1}")"
check_eq "asha: eta 1 is refused" "$STATUS" 400
check "asha: ... at its field" grep -q 'hyperparameters.ashaReductionFactor' <<<"$BODY"

# (c) cancel of a running study: both running trials stop, no third starts
cmd='echo $$ >pid; exec sleep 30'
hp=',"hyperparameters":{"goal":"MAXIMIZE","maxTrials":4,"maxParallelTrials":2,"params":[{"parameterName":"x","type":"DOUBLE","minValue":0,"maxValue":1}]}'
api POST /v1/projects/p1/jobs "$(job_json cancel1 "$cmd" "$hp")"
check "cancel: running" wait_state cancel1 RUNNING 10
for _ in $(seq 1 100); do
    [ -s "$T/data/jobs/p1/cancel1/1/pid" ] && [ -s "$T/data/jobs/p1/cancel1/2/pid" ] && break
    sleep 0.05
done
pids="$(cat "$T/data/jobs/p1/cancel1/1/pid" "$T/data/jobs/p1/cancel1/2/pid" 2>/dev/null | tr '\n' ' ')"
check "cancel: two trials running ($pids)" test "$(echo $pids | wc -w)" = 2
check_eq "cancel: trainingOutput shows the running trials RUNNING" \
    "$(out_of cancel1 '[(x["trialId"], x["state"], "startTime" in x) for x in t]')" "[('1', 'RUNNING', True), ('2', 'RUNNING', True)]"
api POST /v1/projects/p1/jobs/cancel1:cancel '{}'
check_eq "cancel: accepted" "$STATUS" 200
check "cancel: CANCELLED" wait_state cancel1 CANCELLED 10
check "cancel: no trial process remains" bash -c "! kill -0 $pids 2>/dev/null"
check_eq "cancel: 2 trials, both CANCELLED, none started after" \
    "$(out_of cancel1 '[(x["trialId"], x["state"]) for x in t]')" "[('1', 'CANCELLED'), ('2', 'CANCELLED')]"
sleep 0.5
check_eq "cancel: stays CANCELLED" "$(job_state cancel1)" CANCELLED

# (d) kill -9 of kilnd mid-study, restart on the same data dir: the study
# finishes with its 4 trials; a trial that had ended does not run again
# (each reports once at its start and once at its end: a trial run again
# must not count its first run's report)
cmd='echo "{\"training/hptuning/metric\": 0, \"global_step\": 1}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "start $CLOUD_ML_TRIAL_ID" >>'"$W"'/runs; sleep 1.5; echo "{\"training/hptuning/metric\": $CLOUD_ML_TRIAL_ID, \"global_step\": 2}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "end $CLOUD_ML_TRIAL_ID" >>'"$W"'/runs'
hp=',"hyperparameters":{"goal":"MAXIMIZE","algorithm":"RANDOM_SEARCH","maxTrials":4,"maxParallelTrials":2,"params":[{"parameterName":"x","type":"DOUBLE","minValue":0,"maxValue":1}]}'
api POST /v1/projects/p1/jobs "$(job_json k9tune "$cmd" "$hp")"
wait_file "$W/runs" 'start 3' 10
before=$(out_of k9tune '[(x["trialId"], x["hyperparameters"]["x"]) for x in t]')
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
ended=$(grep '^end' "$W/runs" | sort | tr '\n' ' ')
check "k9: trials had ended before the kill ($ended)" test -n "$ended"
start_kilnd "$T/data"
check "k9: the study succeeds after the restart" wait_state k9tune SUCCEEDED 30
check_eq "k9: 4 trials, ids 1-4 once each, all SUCCEEDED" \
    "$(out_of k9tune '[(x["trialId"], x["state"]) for x in t]')" \
    "[('1', 'SUCCEEDED'), ('2', 'SUCCEEDED'), ('3', 'SUCCEEDED'), ('4', 'SUCCEEDED')]"
check_eq "k9: two reports per trial, the last one the objective" \
    "$(out_of k9tune '[(x["trialId"], len(x["allMetrics"]), x["finalMetric"]["objectiveValue"]) for x in t]')" \
    "[('1', 2, 1.0), ('2', 2, 2.0), ('3', 2, 3.0), ('4', 2, 4.0)]"
check_eq "k9: each trial ended once" "$(grep -c '^end' "$W/runs")" 4
for e in $ended; do
    [ "$e" = end ] && continue
    check_eq "k9: trial $e (ended before the kill) started once" "$(grep -c "^start $e\$" "$W/runs")" 1
done
after=$(out_of k9tune '[(x["trialId"], x["hyperparameters"]["x"]) for x in t]')
check "k9: the trials kept their values ($before)" "$PY" -c "
import sys; b, a = $before, $after
sys.exit(0 if b and all(x in a for x in b) else 1)"
finish

#!/usr/bin/env bash
# it_tuning_adopt.sh - a running study's trials outlive kilnd: kill -9 of
# kilnd while 2 trials of an ASHA study run, and a new kilnd on the same data
# dir adopts them through their monitors instead of running them again.
#   - the same trial processes (same PIDs) go on and end, each trial runs
#     once (a start line per run);
#   - no report is lost or counted twice (the hypertune file is read on from
#     the recorded offset): allMetrics holds each trial's reports once;
#   - ASHA's rungs recorded before the kill stay, in order, and decide after
#     it (trial 2 stopped at rung 1 by trial 1's record, trials 3 and 4 at
#     rung 0 by the records from before the kill);
#   - the study SUCCEEDS with every trial's finalMetric.
# Then (b): a graceful stop of kilnd (an upgrade) mid-trial, median rule on:
# the running trial is adopted too, every report counted once.
. "$(dirname "$0")/lib.sh"

W=$T/w
mkdir -p "$W"
start_kilnd "$T/data"

# GRID over q = 1..4, MINIMIZE loss, ASHA eta 2: rungs at steps 1, 2, 4.
# q=1 reports loss 1 at steps 1-4 (step 1 before the kill, 2-4 after "go");
# q=2 reports 0.5 at step 1 after trial 1's (the best at rung 0: goes on),
# then, after "go" and trial 1's step 2, loss 4 at step 2 (stopped at rung 1);
# q=3, 4 report q at step 1 (stopped at rung 0). A stopped trial notes its
# end on SIGTERM.
cmd='q=${0#--q=}; id=$CLOUD_ML_TRIAL_ID; W='"$W"'
echo "$$" >>"$W/start.$id"
trap '"'"'kill $! 2>/dev/null; echo "$$ term" >>"$W/end.$id"; exit 0'"'"' TERM
rep() { echo "{\"loss\": $2, \"global_step\": $1}" >>"$CLOUD_ML_HP_METRIC_FILE"; }
waitf() { for _ in $(seq 1 400); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }
case $q in
1) rep 1 1; touch "$W/r1.1"; waitf "$W/go"; rep 2 1; touch "$W/r1.2"; sleep 0.5; rep 3 1; sleep 0.5; rep 4 1; sleep 0.3 ;;
2) waitf "$W/r1.1"; sleep 1.5; rep 1 0.5; waitf "$W/go"; waitf "$W/r1.2"; sleep 1.5; rep 2 4; sleep 30 & wait $! ;;
*) rep 1 "$q"; sleep 30 & wait $! ;;
esac
echo "$$ end" >>"$W/end.$id"'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","algorithm":"GRID_SEARCH","maxTrials":4,"maxParallelTrials":2,"enableTrialEarlyStopping":true,"earlyStoppingRule":"ASHA","ashaReductionFactor":2,"params":[{"parameterName":"q","type":"INTEGER","minValue":1,"maxValue":4}]}'
api POST /v1/projects/p1/jobs "$(job_json ad1 "$cmd" "$hp")"
check_eq "create" "$STATUS" 200

out_of() { # out_of JOB PYTHON-EXPR-OF-o(trainingOutput), t (its trials by id)
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | "$PY" -c "
import json, sys
o = json.load(sys.stdin).get('trainingOutput', {})
t = sorted(o.get('trials', []), key=lambda x: int(x['trialId']))
print($2)"
}
# the study's ASHA rungs as the runtime record keeps them
rungs() {
    "$PY" -c '
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rt = json.loads(db.execute("SELECT runtime FROM jobs WHERE job_id = ?", ("ad1",)).fetchone()[0])
print([[(i, v) for i, v in r] for r in rt["study"]["asha"]["rungs"]])' "$T/data/kilnd.db"
}

# both trials have reported step 1 (and kilnd has read it: allMetrics)
for _ in $(seq 1 200); do
    [ "$(out_of ad1 '[len(x.get("allMetrics", [])) for x in t]' 2>/dev/null)" = "[1, 1]" ] && break
    sleep 0.1
done
check_eq "before the kill: trials 1 and 2 RUNNING, one report each" \
    "$(out_of ad1 '[(x["trialId"], x["state"], len(x.get("allMetrics", []))) for x in t]')" \
    "[('1', 'RUNNING', 1), ('2', 'RUNNING', 1)]"
check_eq "before the kill: rung 0 holds trials 1 and 2" "$(rungs)" "[[(1, 1.0), (2, 0.5)]]"
pid1=$(cat "$W/start.1" 2>/dev/null)
pid2=$(cat "$W/start.2" 2>/dev/null)
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
check "the trials outlive kilnd ($pid1 $pid2)" kill -0 $pid1 $pid2
start_kilnd "$T/data"
adopted() { grep -q "the study goes on with 2 trials kept, 2 running trials adopted" "$T/data/jobs/p1/ad1/log.tsv"; }
for _ in $(seq 1 100); do adopted && break; sleep 0.1; done
check "the new kilnd adopted the 2 running trials" adopted
touch "$W/go"
check "the study succeeds after the restart" wait_state ad1 SUCCEEDED 60

for id in 1 2; do
    check_eq "trial $id ran once" "$(wc -l <"$W/start.$id")" 1
done
check_eq "trial 1: the same process ended (pid $pid1)" "$(cat "$W/end.1")" "$pid1 end"
check_eq "trial 2: the same process was stopped at rung 1 (pid $pid2)" "$(cat "$W/end.2")" "$pid2 term"
check_eq "trials 3 and 4 ran once each" "$(cat "$W/start.3" "$W/start.4" | wc -l)" 2
check_eq "every trial SUCCEEDED, 2-4 stopped early, each report once, last value the objective" \
    "$(out_of ad1 '[(x["trialId"], x["state"], x["isTrialStoppedEarly"], len(x["allMetrics"]), x["finalMetric"]["trainingStep"], x["finalMetric"]["objectiveValue"]) for x in t]')" \
    "[('1', 'SUCCEEDED', False, 4, '4', 1.0), ('2', 'SUCCEEDED', True, 2, '2', 4.0), ('3', 'SUCCEEDED', True, 1, '1', 3.0), ('4', 'SUCCEEDED', True, 1, '1', 4.0)]"
check_eq "ASHA: the rungs from before the kill stay, each record once" \
    "$(rungs | "$PY" -c 'import ast, sys; r = ast.literal_eval(sys.stdin.read()); print(r[0][:2], sorted(r[0][2:]), r[1:])')" \
    "[(1, 1.0), (2, 0.5)] [(3, 3.0), (4, 4.0)] [[(1, 1.0), (2, 4.0)], [(1, 1.0)]]"
check "the job's log says the trials were adopted" \
    grep -q "adopted trial 1's 1 running replica" "$T/data/jobs/p1/ad1/log.tsv"
check "... and not run again" bash -c "! grep -q 'runs again from the start' '$T/data/jobs/p1/ad1/log.tsv'"

# (b) a graceful stop of kilnd (an upgrade) mid-trial, with the median
# rule: the running trial is adopted too, its reports before and after the
# restart each counted once; the trial that had ended stays ended
cmd='id=$CLOUD_ML_TRIAL_ID; W='"$W"'
echo "$$" >>"$W/b.start.$id"
rep() { echo "{\"acc\": $2, \"global_step\": $1}" >>"$CLOUD_ML_HP_METRIC_FILE"; }
rep 1 0.$id; rep 2 0.$id
if [ "$id" = 2 ]; then for _ in $(seq 1 400); do [ -e "$W/b.go" ] && break; sleep 0.1; done; fi
rep 3 0.$id; echo "$$" >>"$W/b.end.$id"'
hp=',"hyperparameters":{"goal":"MAXIMIZE","hyperparameterMetricTag":"acc","algorithm":"RANDOM_SEARCH","maxTrials":2,"maxParallelTrials":1,"enableTrialEarlyStopping":true,"params":[{"parameterName":"x","type":"DOUBLE","minValue":0,"maxValue":1}]}'
api POST /v1/projects/p1/jobs "$(job_json ad2 "$cmd" "$hp")"
check_eq "b: create" "$STATUS" 200
for _ in $(seq 1 200); do
    [ "$(out_of ad2 '[(x["state"], len(x.get("allMetrics", []))) for x in t]' 2>/dev/null)" = "[('SUCCEEDED', 3), ('RUNNING', 2)]" ] && break
    sleep 0.1
done
check_eq "b: trial 1 ended, trial 2 running with 2 reports" \
    "$(out_of ad2 '[(x["trialId"], x["state"], len(x.get("allMetrics", []))) for x in t]')" \
    "[('1', 'SUCCEEDED', 3), ('2', 'RUNNING', 2)]"
stop_kilnd
start_kilnd "$T/data"
touch "$W/b.go"
check "b: the study succeeds after the restart" wait_state ad2 SUCCEEDED 30
check_eq "b: each trial ran once, trial 2's process ended" \
    "$(cat "$W/b.start.1" "$W/b.start.2" | wc -l) $(cat "$W/b.end.2" 2>/dev/null)" "2 $(cat "$W/b.start.2")"
check_eq "b: every report once, the last one the objective" \
    "$(out_of ad2 '[(x["trialId"], len(x["allMetrics"]), x["finalMetric"]["objectiveValue"]) for x in t]')" \
    "[('1', 3, 0.1), ('2', 3, 0.2)]"
check "b: trial 2 was adopted" grep -q "adopted trial 2's 1 running replica" "$T/data/jobs/p1/ad2/log.tsv"
finish

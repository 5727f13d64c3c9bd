#!/bin/bash
# tests/service/it_slurm_tuning.sh - hyperparameter tuning jobs under
# `kilnd --executor slurm` (kiln's one
# supervisor, Slurm placing), on the two-node test cluster
# (tests/service/slurm_cluster.sh): each trial is a Slurm allocation of its
# own, kiln-P-J-tN, its replicas srun steps in it, maxParallelTrials of them
# at once, decided by the same study code as on one machine (src/exec/trials,
# src/tune), mirroring it_tuning.sh:
#   - 4 trials, 2 at once (never more than 2 trial allocations in squeue,
#     and 2 seen together), each reporting its metric (the lr itself)
#     through the cloudml-hypertune file on the nodes; SUCCEEDED,
#     trainingOutput lists the 4 trials best first with their final
#     measurement and values; each trial's allocation given back;
#   - resumePreviousJobId: a second job keeps the 4 trials and runs 5 and 6;
#   - enableTrialEarlyStopping (median rule): the bad trials are stopped
#     (their steps signalled, their allocations given back) and count as
#     SUCCEEDED, stopped early;
#   - kiln-train's metrics protocol (reports on stdout) measures trials;
#   - cancel of a running study stops its trials and their allocations;
#   - runPolicy.activeDeadlineSeconds per trial (DeadlineExceeded);
#   - kill -9 of kilnd mid-study: the next kilnd adopts the trials' replicas
#     (their monitors and srun steps outlived it), no allocation asked twice;
#   - restart policies per trial: OnFailure runs a failed trial again in its
#     own allocation, ExitCode 3 fails it.
# Ported from --slurm-launch batch (src/exec/slurm/slurm.c), which is gone.
# Dropped with it, as they described its internals only: the trial's
# slurm/trial-N/job.sbatch (steps writes slurm/kiln-P-J-tN/, checked
# instead), "following trial N's Slurm job" (steps adopts the replicas:
# "adopted trial N's ... replica", checked instead) and "submitting it again"
# as a new Slurm job per retry (steps restarts in the trial's allocation:
# one allocation asked, checked instead).
# Skipped (77) with the reason where Slurm cannot run here (probe `slurm`).
PORT_RANGE=59000-59799 # the cluster's own daemons listen on 59900-59992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 59900 59992
start_kilnd "$T/d" --executor slurm --slurm-partition kiln --kiln-train "$BUILD/bin/kiln-train"

# trial_jobs JOB: how many of JOB's trials have a Slurm job pending or running
trial_jobs() {
    squeue -h -o '%j %T' 2>/dev/null | grep -cE "^kiln-p1-$1-t[0-9]+ (PENDING|CONFIGURING|RUNNING|COMPLETING)$"
}
# trial_holds JOB: the same without COMPLETING (an allocation kilnd gave
# back once its trial ended, which Slurm is still cleaning up)
trial_holds() {
    squeue -h -o '%j %T' 2>/dev/null | grep -cE "^kiln-p1-$1-t[0-9]+ (PENDING|CONFIGURING|RUNNING)$"
}
out_of() { # out_of JOB PYTHON-EXPR-OF-o(trainingOutput), t (trials by id)
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | "$PY" -c "
import json, sys
o = json.load(sys.stdin).get('trainingOutput', {})
t = sorted(o.get('trials', []), key=lambda x: int(x['trialId']))
print($2)"
}

# ---- 4 trials, 2 at once; the metric is the lr itself ----
cmd='lr=${0#--lr=}; echo "{\"loss\": $lr, \"global_step\": \"7\"}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "$CLOUD_ML_TRIAL_ID $SLURM_JOB_ID $SLURMD_NODENAME $TF_CONFIG" >trial.txt; echo "hello from trial $CLOUD_ML_TRIAL_ID"; sleep 3'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":4,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1,"scaleType":"UNIT_LOG_SCALE"}]}'
api POST /v1/projects/p1/jobs "$(job_json tune1 "$cmd" "$hp")"
check_eq "create" "$STATUS" 200
most=0 seen2=0 over=""
for _ in $(seq 1 600); do
    n=$(trial_holds tune1)
    [ "$n" -gt "$most" ] && most=$n
    [ "$n" -gt 2 ] && [ -z "$over" ] && over=$(squeue -h -o '%i %j %T' 2>/dev/null | tr '\n' ';')
    [ "$n" = 2 ] && seen2=1
    case "$(job_state tune1)" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    sleep 0.1
done
check_eq "the study SUCCEEDED" "$(job_state tune1)" SUCCEEDED
check "at most 2 trials' allocations at a time (most seen: $most${over:+; squeue: $over})" test "$most" -le 2
check "2 trials ran at once" test "$seen2" = 1
api GET /v1/projects/p1/jobs/tune1
out=$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
o = json.load(sys.stdin)["trainingOutput"]
t = o["trials"]
v = [x["finalMetric"]["objectiveValue"] for x in t]
print(o["isHyperparameterTuningJob"], o["completedTrialCount"], len(t), v == sorted(v),
      all(x["finalMetric"]["trainingStep"] == "7" for x in t),
      all(abs(x["finalMetric"]["objectiveValue"] - float(x["hyperparameters"]["lr"])) < 1e-9 for x in t),
      all(x["state"] == "SUCCEEDED" and not x["isTrialStoppedEarly"] for x in t),
      sorted(x["trialId"] for x in t))')
check_eq "4 trials, best first, each with its lr as finalMetric at step 7" "$out" "True 4 4 True True True True ['1', '2', '3', '4']"
J=$T/d/jobs/p1/tune1
check "trial 3 ran in its own directory on a Slurm node with TF_CONFIG task.trial" \
    grep -qE '^3 [0-9]+ n[12] .*"trial":"3"' "$J/3/trial.txt"
check_eq "each trial was an allocation of its own" \
    "$(cut -d' ' -f2 "$J"/[1-4]/trial.txt | sort -u | wc -l)" 4
check "each trial's allocation files are under slurm/kiln-p1-tune1-tN" \
    test "$(ls "$J"/slurm/kiln-p1-tune1-t[1-4]/layout.* 2>/dev/null | wc -l)" = 4
check_eq "each trial's allocation was given back" "$(trial_jobs tune1)" 0
check "the trial's log lines are in the job's log, under its task" \
    grep -q 'trial-2-master-replica-0.hello from trial 2$' "$J/log.tsv"
check_eq "cli: stream-logs --trial 3 shows trial 3's line" \
    "$("$KILN" jobs stream-logs tune1 --trial 3 | cut -f3,4)" "trial-3-master-replica-0	hello from trial 3"

# ---- resumePreviousJobId: tune1's 4 trials kept, 5 and 6 new ----
hp6=${hp/\"maxTrials\":4/\"maxTrials\":6}
hp6=${hp6/\"params\"/\"resumePreviousJobId\":\"tune1\",\"params\"}
api POST /v1/projects/p1/jobs "$(job_json tune2 "$cmd" "$hp6")"
check_eq "resume: create" "$STATUS" 200
check "resume: the study succeeds" wait_state tune2 SUCCEEDED 90
check_eq "resume: 6 trials, 1-4 tune1's, 5 and 6 new" \
    "$(out_of tune2 'o["completedTrialCount"], [x["trialId"] for x in t]')" \
    "6 ['1', '2', '3', '4', '5', '6']"
check "resume: trials 5 and 6 ran in tune2's directory, 1 did not" \
    test -s "$T/d/jobs/p1/tune2/5/trial.txt" -a -s "$T/d/jobs/p1/tune2/6/trial.txt" -a ! -e "$T/d/jobs/p1/tune2/1"

# ---- early stopping: trials 1-3 (q=1..3) report loss q at steps 1..4 and
# succeed; trials 4 and 5 report worse and would run 40 s: the median rule
# stops them after their reports are read ----
cmd='q=${0#--q=}; for s in 1 2 3 4; do echo "{\"loss\": $q, \"global_step\": $s}" >>"$CLOUD_ML_HP_METRIC_FILE"; [ "$q" -gt 3 ] && sleep 10 || sleep 0.3; done'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","algorithm":"GRID_SEARCH","maxTrials":5,"maxParallelTrials":3,"enableTrialEarlyStopping":true,"params":[{"parameterName":"q","type":"INTEGER","minValue":1,"maxValue":5}]}'
api POST /v1/projects/p1/jobs "$(job_json early1 "$cmd" "$hp")"
check_eq "early: create" "$STATUS" 200
t0=$SECONDS
check "early: the study succeeds" wait_state early1 SUCCEEDED 60
check "early: well before the bad trials' 40 s" test $((SECONDS - t0)) -lt 35
check_eq "early: trials 4 and 5 stopped early, 1-3 not" \
    "$(out_of early1 '[(x["trialId"], x["state"], x["isTrialStoppedEarly"]) for x in t]')" \
    "[('1', 'SUCCEEDED', False), ('2', 'SUCCEEDED', False), ('3', 'SUCCEEDED', False), ('4', 'SUCCEEDED', True), ('5', 'SUCCEEDED', True)]"
check_eq "early: best first, objective = the last value" \
    "$(out_of early1 '[(x["trialId"], x["finalMetric"]["objectiveValue"], x["finalMetric"]["trainingStep"]) for x in o["trials"][:3]]')" \
    "[('1', 1.0, '4'), ('2', 2.0, '4'), ('3', 3.0, '4')]"
check "early: the stop is in the job's log" grep -q "Trial 4 stopped early" "$T/d/jobs/p1/early1/log.tsv"
for _ in $(seq 1 50); do [ "$(trial_jobs early1)" = 0 ] && break; sleep 0.1; done
check_eq "early: the stopped trials' allocations were given back" "$(trial_jobs early1)" 0

# ---- kiln-train's protocol: training metrics reports on stdout (the
# monitor's .metrics file on the node), "test_accuracy" as the tag ----
cmd='q=${0#--q=}; echo "{\"event\":\"epoch\",\"epoch\":1,\"step\":5,\"test_accuracy\":0.$q}"; echo "{\"event\":\"epoch\",\"rank\":1,\"step\":6,\"test_accuracy\":0.99}"'
hp=',"hyperparameters":{"goal":"MAXIMIZE","hyperparameterMetricTag":"test_accuracy","algorithm":"GRID_SEARCH","maxTrials":2,"maxParallelTrials":2,"params":[{"parameterName":"q","type":"INTEGER","minValue":1,"maxValue":2}]}'
api POST /v1/projects/p1/jobs "$(job_json stdout1 "$cmd" "$hp")"
check_eq "stdout reports: create" "$STATUS" 200
check "stdout reports: the study succeeds" wait_state stdout1 SUCCEEDED 60
check_eq "stdout reports: each trial measured from its stdout, best (MAXIMIZE) first, rank 1 ignored" \
    "$(out_of stdout1 '[(x["trialId"], x["finalMetric"]["objectiveValue"], x["finalMetric"]["trainingStep"]) for x in o["trials"]]')" \
    "[('2', 0.2, '5'), ('1', 0.1, '5')]"

# ---- cancel of a running study: its trials stop, their allocations go ----
cmd='echo "{\"loss\": 1}" >>"$CLOUD_ML_HP_METRIC_FILE"; sleep 60'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":4,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1}]}'
api POST /v1/projects/p1/jobs "$(job_json cancel1 "$cmd" "$hp")"
check_eq "cancel: create" "$STATUS" 200
# (an allocation is asked for before its trial exists: wait for both
# trials' replicas to have started in theirs)
for _ in $(seq 1 300); do [ "$(grep -c 'Started trial-[12]-master' "$T/d/jobs/p1/cancel1/log.tsv" 2>/dev/null)" = 2 ] && break; sleep 0.1; done
check_eq "cancel: 2 trials in Slurm" "$(trial_jobs cancel1)" 2
check_eq "cancel: both running in allocations of their own" \
    "$(squeue -h -t RUNNING -o %j 2>/dev/null | grep -c '^kiln-p1-cancel1-t[12]$')" 2
api POST /v1/projects/p1/jobs/cancel1:cancel '{}'
check "cancel: the job is CANCELLED" wait_state cancel1 CANCELLED 40
for _ in $(seq 1 100); do [ "$(trial_jobs cancel1)" = 0 ] && break; sleep 0.1; done
check_eq "cancel: no trial's allocation is left" "$(trial_jobs cancel1)" 0
check_eq "cancel: no third trial was started" "$(out_of cancel1 'len(t)')" 2

# ---- runPolicy.activeDeadlineSeconds counts per trial, from when it
# runs: the trial FAILS with DeadlineExceeded, its allocation given back ----
cmd='echo "{\"loss\": 1}" >>"$CLOUD_ML_HP_METRIC_FILE"; sleep 60'
hp=',"runPolicy":{"activeDeadlineSeconds":"2"},"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":1,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1}]}'
api POST /v1/projects/p1/jobs "$(job_json deadline1 "$cmd" "$hp")"
check_eq "deadline: create" "$STATUS" 200
check "deadline: the study FAILS (its one trial did)" wait_state deadline1 FAILED 40
check_eq "deadline: the trial FAILED" "$(out_of deadline1 '[(x["trialId"], x["state"]) for x in t]')" "[('1', 'FAILED')]"
check "deadline: ... with DeadlineExceeded" grep -q "Trial 1 ended FAILED.*DeadlineExceeded" "$T/d/jobs/p1/deadline1/log.tsv"
for _ in $(seq 1 50); do [ "$(trial_jobs deadline1)" = 0 ] && break; sleep 0.1; done
check_eq "deadline: its allocation was given back" "$(trial_jobs deadline1)" 0

# ---- kill -9 of kilnd mid-study: the trials' steps run on in their
# allocations (their monitors and srun outlive kilnd), the next kilnd adopts
# them (no trial run twice, no allocation asked twice) and reads their
# reports on from the recorded offsets (none counted twice) ----
cmd='lr=${0#--lr=}; echo "$CLOUD_ML_TRIAL_ID $SLURM_JOB_ID" >>runs.txt; echo "{\"loss\": 1, \"global_step\": 1}" >>"$CLOUD_ML_HP_METRIC_FILE"; sleep 5; echo "{\"loss\": $lr, \"global_step\": 2}" >>"$CLOUD_ML_HP_METRIC_FILE"'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":3,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1}]}'
api POST /v1/projects/p1/jobs "$(job_json restart1 "$cmd" "$hp")"
check_eq "restart: create" "$STATUS" 200
R=$T/d/jobs/p1/restart1
for _ in $(seq 1 300); do [ -s "$R/1/runs.txt" ] && [ -s "$R/2/runs.txt" ] && break; sleep 0.1; done
sleep 1 # the first reports are read and recorded
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
sleep 1
start_kilnd "$T/d" --executor slurm --slurm-partition kiln --kiln-train "$BUILD/bin/kiln-train"
check "restart: the study succeeds" wait_state restart1 SUCCEEDED 60
check_eq "restart: trials 1 and 2 ran once each, 3 after them" \
    "$(cat "$R"/1/runs.txt "$R"/2/runs.txt "$R"/3/runs.txt 2>/dev/null | cut -d' ' -f1 | tr '\n' ' ')" "1 2 3 "
check "restart: trial 1's replica adopted, not started again" grep -q "kilnd restarted: adopted trial 1's 1 running replica" "$R/log.tsv"
check "restart: trial 2's replica adopted too" grep -q "kilnd restarted: adopted trial 2's 1 running replica" "$R/log.tsv"
check_eq "restart: one allocation asked for each trial" \
    "$(grep -o 'Asked for Slurm allocation [0-9]* (kiln-p1-restart1-t[0-9]*)' "$R/log.tsv" | sort | uniq | wc -l) $(grep -c 'Asked for Slurm allocation' "$R/log.tsv")" "3 3"
check_eq "restart: every trial's 2 reports, none twice, the lr last" \
    "$(out_of restart1 '[(x["trialId"], len(x["allMetrics"]), x["finalMetric"]["trainingStep"], abs(x["finalMetric"]["objectiveValue"] - float(x["hyperparameters"]["lr"])) < 1e-9) for x in t]')" \
    "[('1', 2, '2', True), ('2', 2, '2', True), ('3', 2, '2', True)]"

# ---- restart policies, per trial as on one machine: OnFailure runs a
# failed trial's replicas again (in the trial's allocation, the same trial
# and values); ExitCode with 3 does not ----
cmd='lr=${0#--lr=}; if [ ! -e tried ]; then touch tried; echo "failing once"; exit 3; fi; echo "{\"loss\": $lr}" >>"$CLOUD_ML_HP_METRIC_FILE"'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":2,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1}]}'
job=$(job_json retry1 "$cmd" "$hp")
api POST /v1/projects/p1/jobs "${job/\"masterConfig\":\{/\"masterConfig\":\{\"restartPolicy\":\"OnFailure\",}"
check_eq "OnFailure: create" "$STATUS" 200
check "OnFailure: the study succeeds" wait_state retry1 SUCCEEDED 60
check_eq "OnFailure: both trials SUCCEEDED on their second run, measured" \
    "$(out_of retry1 '[(x["trialId"], x["state"], abs(x["finalMetric"]["objectiveValue"] - float(x["hyperparameters"]["lr"])) < 1e-9) for x in t]')" \
    "[('1', 'SUCCEEDED', True), ('2', 'SUCCEEDED', True)]"
check "OnFailure: trial 1 was started again" \
    grep -q "The replica trial-1-master-replica-0 exited with status 3; restarting the job's replicas (restart policy OnFailure, restart 1 of at most 3)" "$T/d/jobs/p1/retry1/log.tsv"
check_eq "OnFailure: in the trial's own allocation (one asked for each trial)" \
    "$(grep -c 'Asked for Slurm allocation [0-9]* (kiln-p1-retry1-t1)' "$T/d/jobs/p1/retry1/log.tsv") $(grep -c 'Asked for Slurm allocation [0-9]* (kiln-p1-retry1-t2)' "$T/d/jobs/p1/retry1/log.tsv")" "1 1"
hp1=${hp/\"maxTrials\":2,\"maxParallelTrials\":2/\"maxTrials\":1,\"maxParallelTrials\":1}
job=$(job_json retry2 "$cmd" "$hp1")
api POST /v1/projects/p1/jobs "${job/\"masterConfig\":\{/\"masterConfig\":\{\"restartPolicy\":\"ExitCode\",}"
check_eq "ExitCode: create" "$STATUS" 200
check "ExitCode: exit 3 is permanent: the study FAILS" wait_state retry2 FAILED 60
check_eq "ExitCode: its one trial FAILED, not run again" \
    "$(out_of retry2 '[(x["trialId"], x["state"]) for x in t]')" "[('1', 'FAILED')]"
check "ExitCode: ... saying why" grep -q "Trial 1 ended FAILED.*non-zero status of 3" "$T/d/jobs/p1/retry2/log.tsv"

finish

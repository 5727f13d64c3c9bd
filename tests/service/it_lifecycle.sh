#!/bin/bash
# tests/service/it_lifecycle.sh - a whole job on a real kilnd: master, two
# workers, a parameter server and an evaluator as plain processes; what each
# sees (TF_CONFIG, CLUSTER_SPEC, PyTorch variables, CUDA_VISIBLE_DEVICES,
# ports), the state transitions, success when the master succeeds with the
# leftover ps/evaluator stopped, logs (REST and `kiln jobs stream-logs`), and
# a Python package job with user args and --job-dir.
. "$(dirname "$0")/lib.sh"

start_kilnd "$T/d"
OUT=$T/out
mkdir -p "$OUT"

# master waits (bounded) for both workers, then succeeds; ps/evaluator would run for a minute
# (each replica writes its environment to a temp file and renames it: complete or absent)
dump="env > $OUT/\$KILN_TASK_NAME.tmp && mv $OUT/\$KILN_TASK_NAME.tmp $OUT/\$KILN_TASK_NAME.env"
master="$dump; for i in \$(seq 1 200); do n=\$(ls $OUT/*.env | wc -l); [ \$n -ge 5 ] && break; sleep 0.05; done; echo master done"
worker="$dump; echo worker \$RANK of \$WORLD_SIZE; echo to-stderr >&2"
ps="trap 'echo ps got TERM; exit 0' TERM; $dump; sleep 60 & wait"
ev="$dump; exec sleep 60"
q() { printf '%s' "$1" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }
body=$(
    cat <<EOF
{"jobId":"tf_1","labels":{"kind":"env"},"trainingInput":{"scaleTier":"CUSTOM","region":"us-central1",
 "masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c",$(q "$master")]},
 "workerType":"n1-standard-4","workerCount":"2","workerConfig":{"containerCommand":["sh","-c",$(q "$worker")]},
 "parameterServerType":"n1-standard-4","parameterServerCount":"1","parameterServerConfig":{"containerCommand":["sh","-c",$(q "$ps")]},
 "evaluatorType":"n1-standard-4","evaluatorCount":"1","evaluatorConfig":{"containerCommand":["sh","-c",$(q "$ev")]}}}
EOF
)
t0=$(date +%s.%N)
api POST /v1/projects/p1/jobs "$body"
check_eq "create" "$STATUS" 200
check "SUCCEEDED" wait_state tf_1 SUCCEEDED 20
t1=$(date +%s.%N)
check "leftover ps/evaluator stopped at once, not after 60 s" "$PY" -c "import sys; sys.exit(0 if $t1 - $t0 < 10 else 1)"

# TF_CONFIG / CLUSTER_SPEC / PyTorch / CUDA per replica
"$PY" - "$OUT" <<'EOF' >"$T/envcheck" 2>&1
import json, os, sys
out = sys.argv[1]
def env(task):
    d = {}
    for line in open(os.path.join(out, task + ".env")):
        k, _, v = line.rstrip("\n").partition("=")
        d[k] = v
    return d
tasks = ["master-replica-0", "worker-replica-0", "worker-replica-1", "ps-replica-0", "evaluator-replica-0"]
E = {t: env(t) for t in tasks}
bad = []
def want(c, msg):
    if not c:
        bad.append(msg)
tf = {t: json.loads(E[t]["TF_CONFIG"]) for t in tasks}
cl = tf["master-replica-0"]["cluster"]
want(list(tf["master-replica-0"].keys()) == ["cluster", "task", "job", "environment"], "TF_CONFIG keys")
want(sorted(cl.keys()) == ["master", "ps", "worker"], "cluster roles %s" % sorted(cl))
want(len(cl["master"]) == 1 and len(cl["worker"]) == 2 and len(cl["ps"]) == 1, "cluster sizes")
for t in tasks:
    want(tf[t]["cluster"] == cl, "same cluster for " + t)
    want(tf[t]["environment"] == "cloud", "environment for " + t)
    want(tf[t]["job"]["workerCount"] == "2" and tf[t]["job"]["scaleTier"] == "CUSTOM", "job for " + t)
    want(E[t]["CLUSTER_SPEC"] == E[t]["TF_CONFIG"], "CLUSTER_SPEC for " + t)
    want("CUDA_VISIBLE_DEVICES" in E[t] and E[t]["CUDA_VISIBLE_DEVICES"] == "", "CUDA empty for " + t)
types = {t: (tf[t]["task"]["type"], tf[t]["task"]["index"]) for t in tasks}
want(types == {"master-replica-0": ("master", 0), "worker-replica-0": ("worker", 0),
               "worker-replica-1": ("worker", 1), "ps-replica-0": ("ps", 0),
               "evaluator-replica-0": ("evaluator", 0)}, "task types %s" % types)
ports = [a.split(":")[1] for r in cl.values() for a in r]
want(len(set(ports)) == len(ports) == 4, "ports distinct %s" % ports)
want(E["master-replica-0"]["RANK"] == "0" and E["worker-replica-0"]["RANK"] == "1" and E["worker-replica-1"]["RANK"] == "2", "RANK")
want(all(E[t]["WORLD_SIZE"] == "3" for t in tasks[:3]), "WORLD_SIZE")
want(E["worker-replica-1"]["MASTER_ADDR"] + ":" + E["worker-replica-1"]["MASTER_PORT"] == cl["master"][0], "MASTER_ADDR/PORT")
want("RANK" not in E["ps-replica-0"], "ps has no RANK")
print("\n".join(bad) if bad else "ok")
EOF
check "replica environment ($(tr '\n' ';' <"$T/envcheck"))" test "$(cat "$T/envcheck")" = ok

# logs: events and replica lines, tab-separated, in order
"$KILN" jobs stream-logs tf_1 >"$T/logs"
check_eq "stream-logs exit (SUCCEEDED)" "$?" 0
check "every line has 4 fields" awk -F'\t' 'NF < 4 { exit 1 }' "$T/logs"
check "worker line" grep -qP '^INFO\t\S+\tworker-replica-1\tworker 2 of 3$' "$T/logs"
check "stderr is ERROR" grep -qP '^ERROR\t\S+\tworker-replica-0\tto-stderr$' "$T/logs"
check "ps got SIGTERM" grep -qP '\tps-replica-0\tps got TERM$' "$T/logs"
order=$(grep -P '\tservice\t' "$T/logs" | grep -oE 'Job (QUEUED|PREPARING|RUNNING)|completed successfully' | tr '\n' ,)
check_eq "service events in order" "$order" "Job QUEUED,Job PREPARING,Job RUNNING,completed successfully,"
"$KILN" jobs stream-logs tf_1 --task-name master-replica-0 >"$T/mlogs"
check "task filter keeps master" grep -q 'master done' "$T/mlogs"
check_eq "task filter drops others" "$(cut -f3 "$T/mlogs" | sort -u)" master-replica-0
check "per-replica log file" grep -q 'worker 1 of 3' "$T/d/jobs/p1/tf_1/replicas/worker-replica-0.log"

# follow mode: stream a running job until it ends
api POST /v1/projects/p1/jobs "$(job_json follow_1 'for i in 1 2 3; do echo tick $i; sleep 0.3; done')"
timeout 20 "$KILN" jobs stream-logs follow_1 >"$T/flogs"
check_eq "follow exits 0 when the job succeeds" "$?" 0
check_eq "follow saw every tick" "$(grep -c 'tick ' "$T/flogs")" 3
api POST /v1/projects/p1/jobs "$(job_json follow_2 'echo bad; exit 4')"
timeout 20 "$KILN" jobs stream-logs follow_2 >/dev/null
check_eq "follow exits 5 when the job fails" "$?" 5

# a Python package job: staged copy on PYTHONPATH, user args, --job-dir
mkdir -p "$T/src/trainer"
: >"$T/src/trainer/__init__.py"
cat >"$T/src/trainer/task.py" <<'EOF'
import os, sys, json
print("ARGS " + json.dumps(sys.argv[1:]))
print("FROM " + os.path.dirname(os.path.abspath(__file__)))
EOF
"$KILN" jobs submit training py_1 --package-path "$T/src/trainer" --module-name trainer.task \
    --job-dir "$T/jobdir" --region us-central1 --stream-logs -- --epochs 3 "two words" >"$T/pylogs" 2>&1
check_eq "python job succeeds" "$?" 0
check "user args then --job-dir" grep -qF 'ARGS ["--epochs", "3", "two words", "--job-dir", "'"$T"'/jobdir"]' "$T/pylogs"
check "runs the staged copy" grep -qF "FROM $T/d/jobs/p1/py_1/staging/trainer" "$T/pylogs"

# packages as an sdist (.tar.gz) and as a wheel (.whl), through --packages
mkdir -p "$T/sd/trainer-0.1"
cp -R "$T/src/trainer" "$T/sd/trainer-0.1/"
tar -czf "$T/trainer-0.1.tar.gz" -C "$T/sd" trainer-0.1
(cd "$T/src" && "$PY" -c 'import zipfile; z = zipfile.ZipFile("../trainer-0.1-py3-none-any.whl", "w"); [z.write(f) for f in ("trainer/__init__.py", "trainer/task.py")]; z.close()')
"$KILN" jobs submit training sd_1 --packages "$T/trainer-0.1.tar.gz" --module-name trainer.task \
    --stream-logs >"$T/sd.out" 2>&1
check_eq "sdist job succeeds" "$?" 0
check "runs from the unpacked sdist" grep -qF "FROM $T/d/jobs/p1/sd_1/staging/sdist0/trainer-0.1/trainer" "$T/sd.out"
"$KILN" jobs submit training wh_1 --packages "$T/trainer-0.1-py3-none-any.whl" --module-name trainer.task \
    --stream-logs >"$T/wh.out" 2>&1
check_eq "wheel job succeeds" "$?" 0
check "runs from the wheel" grep -qF "FROM $T/d/jobs/p1/wh_1/staging/trainer-0.1-py3-none-any.whl/trainer" "$T/wh.out"

# kiln local train: the same job with no kilnd running (a private one comes and goes)
mkdir -p "$T/tmp"
(unset KILN_ENDPOINT; export TMPDIR=$T/tmp; cd "$T" && "$KILN" local train --package-path "$T/src/trainer" \
    --module-name trainer.task --job-dir "$T/localdir" -- --lr 0.1) >"$T/local.out" 2>&1
check_eq "local train exit" "$?" 0
check "local train ran the module with the args" grep -qF 'ARGS ["--lr", "0.1", "--job-dir", "'"$T"'/localdir"]' "$T/local.out"
check_eq "local train cleaned up its kilnd dir" "$(ls -A "$T/tmp")" ""
(cd "$T" && "$KILN" local train --module-name nosuchmodule_xyz) >/dev/null 2>&1
check_eq "local train of a failing job exits 5" "$?" 5

# a replica that cannot start fails the job with a reason
api POST /v1/projects/p1/jobs '{"jobId":"nocmd","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["/nonexistent/prog"]}}}'
check "missing program -> FAILED" wait_state nocmd FAILED 10
api GET /v1/projects/p1/jobs/nocmd
check "reason given" grep -q "status of 127" <<<"$(printf '%s' "$BODY" | jget errorMessage)"

# --config FILE (AI Platform config.yaml) with flags over it
cat >"$T/config.yaml" <<'EOF2'
labels:
  team: vision
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-standard-4
  workerType: n1-standard-4
  workerCount: 3
  masterConfig:
    containerCommand: [sh, -c, "echo from-config $WORLD_SIZE"]
  workerConfig:
    containerCommand: ["true"]
EOF2
"$KILN" jobs submit training cfg_1 --config "$T/config.yaml" --worker-count 1 --labels team=speech \
    --stream-logs >"$T/cfg.out" 2>&1
check_eq "config job succeeds" "$?" 0
check "flag overrides the file (workerCount 1 -> world 2)" grep -q "from-config 2" "$T/cfg.out"
check_eq "label flag overrides the file" "$("$KILN" jobs describe cfg_1 --format json | jget labels.team)" speech

# a Kubeflow TFJob through the CLI: image + args only, no container runtime here
"$KILN" jobs submit training tfj_1 --tfjob "$(dirname "$0")/../../examples/tfjob/cpu.yaml" >/dev/null 2>&1
check_eq "TFJob accepted" "$?" 0
check "TFJob with only an image fails" wait_state tfj_1 FAILED 10
api GET /v1/projects/p1/jobs/tfj_1
# with podman (bootstrap installs it) the image is pulled, which fails here
# (no registry); without a container runtime the create is refused instead
if [ -z "$(printf '%s' "$BODY" | jget state)" ]; then
    check "TFJob image refused without a container runtime" grep -q "imageUri" <<<"$BODY"
else
    check "reason names the image and the failed pull" grep -q "cannot pull the image registry.local/fashion-mnist:1.0" <<<"$(printf '%s' "$BODY" | jget errorMessage)"
fi
check_eq "TFJob restart policy kept" "$(printf '%s' "$BODY" | jget trainingInput.masterConfig.restartPolicy)" OnFailure

# output that is not UTF-8 still reaches the logs (bytes replaced by '?')
api POST /v1/projects/p1/jobs "$(job_json bin_1 "printf 'a\\377\\376b\\n'; printf 'caf\\303\\251\\n'")"
check "binary-output job succeeds" wait_state bin_1 SUCCEEDED 10
"$KILN" jobs stream-logs bin_1 --task-name master-replica-0 >"$T/bin.out"
check "invalid bytes replaced" grep -qP '\ta\?\?b$' "$T/bin.out"
check "valid UTF-8 kept" grep -q 'café' "$T/bin.out"

# an image with a command runs in a container, never as a plain process:
# here the image cannot be pulled, so the job fails saying so
api POST /v1/projects/p1/jobs '{"jobId":"img_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"imageUri":"registry.local/x:1","containerCommand":["sh","-c","echo plain"]}}}'
if [ "$STATUS" = 200 ]; then
    check "image + command: FAILED, not run as a process" wait_state img_1 FAILED 30
    check "the command did not run bare" bash -c "! grep -q 'plain' '$T/d/jobs/p1/img_1/log.tsv'"
    check "pull failure in the log" grep -q "cannot pull the image registry.local/x:1" "$T/d/jobs/p1/img_1/log.tsv"
else
    check_eq "image refused without a container runtime" "$STATUS" 400
fi

# maxRunningTime: cancelled when exceeded
api POST /v1/projects/p1/jobs "$(job_json slow_1 'sleep 30' ',"scheduling":{"maxRunningTime":"1s"}')"
check "maxRunningTime -> CANCELLED" wait_state slow_1 CANCELLED 10
api GET /v1/projects/p1/jobs/slow_1
check "maxRunningTime reason" grep -q maxRunningTime <<<"$(printf '%s' "$BODY" | jget errorMessage)"

finish

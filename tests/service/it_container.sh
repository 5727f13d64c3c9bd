#!/bin/bash
# tests/service/it_container.sh - replicas with an imageUri run in containers
# through podman (the container executor), on a real kilnd, with an image
# this test builds (busybox, `podman import`; nothing is pulled):
#   1. master + worker containers: SUCCEEDED, TF_CONFIG right in both, the
#      job dir mounted at the same path, containerCommand/containerArgs as
#      ENTRYPOINT/CMD, the program really in a container;
#   2. cancel: SIGTERM reaches the program (--init), and one that ignores it
#      is killed after the grace period, its container gone;
#   3. the ExitCode policy: exit 1 is permanent, 137 (SIGKILL) is retried;
#   4. a missing image: FAILED, saying that the pull failed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need podman

IMG=kiln-it-ctr-$$:1
make_image "$IMG" || {
    fail "cannot build the test image"
    finish
}
start_kilnd "$T/d"
q() { printf '%s' "$1" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }
# ctr_job ID MASTER_SCRIPT WORKER_SCRIPT WORKER_POLICY [extra trainingInput members]
ctr_job() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"imageUri":"localhost/%s","containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"restartPolicy":"%s","containerCommand":["sh","-c",%s]}%s}}' \
        "$1" "$IMG" "$(q "$2")" "$4" "$(q "$3")" "${5:-}"
}
restarts() {
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | jget kilnStatus.restarts
}

# 1. master + worker, each in a container; the worker leaves its TF_CONFIG
# in the job dir (mounted at the same path), the master waits for it
JD=$T/jobdir
m='echo "MASTER_TF $TF_CONFIG"; echo "MASTER_ARGS $0 $*"; test -e /run/.containerenv && echo IN_CONTAINER
for i in $(seq 1 200); do [ -e '"$JD"'/worker.tf ] && break; sleep 0.05; done
echo "WORKER_TF $(cat '"$JD"'/worker.tf)"; echo "CS $CLUSTER_SPEC" | wc -c'
w='echo "$TF_CONFIG" > '"$JD"'/worker.tf; echo worker-done'
body=$(ctr_job tf_1 "$m" "$w" Never ',"jobDir":"'"$JD"'"')
# containerArgs replace the image's CMD (here: $0 and $1 of the script)
body=$(printf '%s' "$body" | "$PY" -c 'import json,sys; j=json.load(sys.stdin); j["trainingInput"]["masterConfig"]["containerArgs"]=["zero","one"]; print(json.dumps(j))')
api POST /v1/projects/p1/jobs "$body"
check_eq "container job accepted" "$STATUS" 200
check "container job SUCCEEDED" wait_state tf_1 SUCCEEDED 60
LOG=$T/d/jobs/p1/tf_1/log.tsv
check "the master ran in a container" grep -q "master-replica-0	IN_CONTAINER" "$LOG"
check "started as a container" grep -q "container kiln-p1-tf_1-master-replica-0 of image localhost/$IMG" "$LOG"
check "containerArgs then --job-dir as CMD" grep -q "MASTER_ARGS zero one --job-dir $JD" "$LOG"
tf_of() { # tf_of PREFIX -> "type index cluster-roles"
    grep -m1 "	$1 " "$LOG" | cut -f4- | sed "s/^$1 //" | "$PY" -c '
import json, sys
t = json.loads(sys.stdin.read())
print(t["task"]["type"], t["task"]["index"], ",".join(sorted(t["cluster"])), len(t["cluster"]["worker"]), t["environment"])'
}
check_eq "master's TF_CONFIG" "$(tf_of MASTER_TF)" "master 0 master,worker 1 cloud"
check_eq "worker's TF_CONFIG (through the mounted job dir)" "$(tf_of WORKER_TF)" "worker 0 master,worker 1 cloud"
check "the worker's own log" grep -q "worker-done" "$T/d/jobs/p1/tf_1/replicas/worker-replica-0.log"

# 2. cancel: a program that exits on SIGTERM says goodbye; one that ignores
# it is killed after the grace period (1 s here) and its container removed
api POST /v1/projects/p1/jobs "$(ctr_job polite "trap 'echo bye; exit 0' TERM; echo up; while true; do sleep 0.1; done" 'sleep 60' Never)"
check "polite running" wait_state polite RUNNING 30
wait_file "$T/d/jobs/p1/polite/log.tsv" "	up$"
api POST /v1/projects/p1/jobs/polite:cancel '{}'
check "polite CANCELLED" wait_state polite CANCELLED 20
check "SIGTERM reached the program in the container" grep -q "master-replica-0	bye" "$T/d/jobs/p1/polite/log.tsv"
api POST /v1/projects/p1/jobs "$(ctr_job stubborn "trap '' TERM; echo up; while true; do sleep 0.1; done" 'sleep 60' Never)"
check "stubborn running" wait_state stubborn RUNNING 30
wait_file "$T/d/jobs/p1/stubborn/log.tsv" "	up$"
t0=$(date +%s)
api POST /v1/projects/p1/jobs/stubborn:cancel '{}'
check "stubborn CANCELLED" wait_state stubborn CANCELLED 20
check "within the grace period and a little" test $(($(date +%s) - t0)) -le 10
for _ in $(seq 1 100); do
    [ -z "$(podman ps -q --filter name=kiln-p1-stubborn 2>/dev/null)" ] && break
    sleep 0.1
done
check_eq "no container left" "$(podman ps -q --filter name=kiln-p1-stubborn | wc -l)" 0

# 3. ExitCode: 1 is permanent; 137 (the program killed by SIGKILL) is retried
api POST /v1/projects/p1/jobs "$(ctr_job exit_1 'sleep 30' 'exit 1' ExitCode)"
check "ExitCode 1: FAILED" wait_state exit_1 FAILED 30
check_eq "ExitCode 1: no restart" "$(restarts exit_1)" 0
api GET /v1/projects/p1/jobs/exit_1
check "ExitCode 1: the container's code in the reason" grep -q "non-zero status of 1 (restart policy ExitCode)" <<<"$(printf '%s' "$BODY" | jget errorMessage)"
m="for i in \$(seq 1 400); do [ -e $JD/ec.ok ] && exit 0; sleep 0.05; done; exit 9"
w="if [ -e $JD/ec.once ]; then touch $JD/ec.ok; exit 0; fi; touch $JD/ec.once; kill -9 \$\$"
api POST /v1/projects/p1/jobs "$(ctr_job exit_137 "$m" "$w" ExitCode ',"jobDir":"'"$JD"'"')"
check "ExitCode 137: retried, SUCCEEDED" wait_state exit_137 SUCCEEDED 60
check_eq "ExitCode 137: one restart" "$(restarts exit_137)" 1
check "ExitCode 137: status 137 seen" grep -q "worker-replica-0 exited with status 137" "$T/d/jobs/p1/exit_137/log.tsv"

# 4. an image that is not there: pulled during PREPARING, which fails here
api POST /v1/projects/p1/jobs '{"jobId":"missing_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"imageUri":"localhost/kiln-missing-'$$':1"}}}'
check "missing image: FAILED" wait_state missing_1 FAILED 60
api GET /v1/projects/p1/jobs/missing_1
check "missing image: the reason says the pull failed" grep -q "cannot pull the image localhost/kiln-missing-$$:1 of master-replica-0" <<<"$(printf '%s' "$BODY" | jget errorMessage)"
check "missing image: the pull's progress is in the log" grep -q "not in local storage: pulling it" "$T/d/jobs/p1/missing_1/log.tsv"
check_eq "missing image: no restart" "$(restarts missing_1)" 0

finish

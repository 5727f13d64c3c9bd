#!/bin/bash
# tests/service/it_adopt.sh - replicas outlive kilnd: kill -9 of kilnd at
# random moments while three jobs run (processes, and containers where
# podman runs), ROUNDS times, a new kilnd started after each. Then:
#   - every job SUCCEEDED, with restarts 0;
#   - no replica was started twice (each notes its start in a file);
#   - every replica's lines are in the job's log once each and in order:
#     no gap, no duplicate (its monitor, not kilnd, writes them);
#   - an exit that happened while kilnd was away is recorded with its code.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"

ROUNDS=${ADOPT_ROUNDS:-4}
LINES=${ADOPT_LINES:-60}
W=$T/w
mkdir -p "$W"
CTR=""
if sh "$(dirname "$0")/../lib/probe.sh" check podman >/dev/null 2>&1; then
    IMG=kiln-it-adopt-$$:1
    make_image "$IMG" && CTR=1
else
    echo "  (podman cannot run here: the container job runs as processes)" >&2
fi
start_kilnd "$T/d"
q() { printf '%s' "$1" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }

# a replica's program: notes its start, then LINES numbered lines, 0.1 s apart
prog() { # prog NAME
    printf 'echo x >> %s/%s.starts; i=1; while [ $i -le %d ]; do echo "%s line $i"; i=$((i+1)); sleep 0.1; done' \
        "$W" "$1" "$LINES" "$1"
}
# job ID IMAGE_MEMBER: master + worker; the master waits for the worker's
# end, and the worker for $W/go, given once every kill -9 is done (a job
# that ended before the first one, on a loaded machine, was never adopted)
job() {
    local mp wp
    mp="$(prog "$1.m"); for k in \$(seq 1 2400); do [ -e $W/$1.w.done ] && exit 0; sleep 0.05; done; exit 3"
    wp="$(prog "$1.w"); while [ ! -e $W/go ]; do sleep 0.05; done; touch $W/$1.w.done"
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{%s"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{%s"containerCommand":["sh","-c",%s]},"jobDir":"%s"}}' \
        "$1" "$2" "$(q "$mp")" "$2" "$(q "$wp")" "$W"
}
api POST /v1/projects/p1/jobs "$(job proc_a '')"
api POST /v1/projects/p1/jobs "$(job proc_b '')"
if [ -n "$CTR" ]; then
    api POST /v1/projects/p1/jobs "$(job ctr_c '"imageUri":"localhost/'"$IMG"'",')"
    JOBS="proc_a proc_b ctr_c"
else
    api POST /v1/projects/p1/jobs "$(job ctr_c '')"
    JOBS="proc_a proc_b ctr_c"
fi
check "jobs running" wait_state proc_a RUNNING 30

# kill -9 at random moments (0.3-1.3 s apart), a new kilnd each time
for r in $(seq 1 "$ROUNDS"); do
    sleep "$(awk -v s=$RANDOM 'BEGIN { srand(s); printf "%.2f", 0.3 + rand() }')"
    kill -9 "$KPID"
    wait "$KPID" 2>/dev/null
    # sometimes kilnd stays away a while: exits happen meanwhile
    [ $((RANDOM % 2)) = 0 ] && sleep 0.5
    start_kilnd "$T/d"
done
touch "$W/go"

for id in $JOBS; do
    check "$id SUCCEEDED after $ROUNDS kill -9 of kilnd" wait_state "$id" SUCCEEDED 60
    api GET "/v1/projects/p1/jobs/$id"
    check_eq "$id: restarts stay 0" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 0
    for t in m w; do
        check_eq "$id.$t started once" "$(wc -l <"$W/$id.$t.starts")" 1
        got=$(grep -F "	$id.$t line " "$T/d/jobs/p1/$id/log.tsv" | sed 's/.* line //' | tr '\n' ' ')
        want=$(seq 1 "$LINES" | tr '\n' ' ')
        check_eq "$id.$t: every line once, in order (no gap, no duplicate)" "$got" "$want"
    done
    check "$id: adopted" grep -q "kilnd restarted: adopted" "$T/d/jobs/p1/$id/log.tsv"
    # (failed once in CI on a loaded machine, with nothing to say why: the
    # service's own lines of that job do)
    grep -q "kilnd restarted: adopted" "$T/d/jobs/p1/$id/log.tsv" ||
        grep "	service	" "$T/d/jobs/p1/$id/log.tsv" | cut -f2- >&2
done
if [ -n "$CTR" ]; then
    check "ctr_c ran in containers" grep -q "container kiln-p1-ctr_c-worker-replica-0 of image" "$T/d/jobs/p1/ctr_c/log.tsv"
fi

# an exit while kilnd is away is recorded with its real code
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"away_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","while [ ! -e %s/away.go ]; do sleep 0.05; done; exit 5"]}}}' "$W")"
check "away_1 running" wait_state away_1 RUNNING 20
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
touch "$W/away.go"
for _ in $(seq 1 100); do [ -e "$T/d/jobs/p1/away_1/replicas/master-replica-0.exit" ] && break; sleep 0.05; done
start_kilnd "$T/d"
check "away_1 FAILED" wait_state away_1 FAILED 20
api GET /v1/projects/p1/jobs/away_1
check "away_1: its real exit code" grep -q "non-zero status of 5" <<<"$(printf '%s' "$BODY" | jget errorMessage)"
check_eq "away_1: no restart" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 0

finish

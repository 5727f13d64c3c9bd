#!/bin/bash
# tests/service/it_fault.sh - crashes of kilnd itself:
#  1. kill -9 during 200 concurrent submissions: after a restart every job
#     whose create was acknowledged (HTTP 200) is there, exactly once;
#  2. kill -9 with a job running: its replicas (and their children) run on
#     under their monitors and the next kilnd adopts them (restarts stay 0);
#     a replica whose monitor died too is judged by its restart policy;
#  3. a full disk for the log dir does not take the job or kilnd down.
. "$(dirname "$0")/lib.sh"

N=${FAULT_JOBS:-200}
start_kilnd "$T/d"
mkdir -p "$T/acks"
for i in $(seq -w 1 "$N"); do echo "$i"; done >"$T/ids"
submit_one() { # ID: writes the HTTP status (000 = no answer) to acks/ID
    local body
    sleep "0.$((RANDOM % 4))" # spread the submissions so that the kill lands among them
    body=$(printf '{"jobId":"crash_%s","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["true"]}}}' "$1")
    curl -s -o /dev/null -w '%{http_code}' -m 20 -X POST -H 'Content-Type: application/json' \
        --data-binary "$body" "$URL/v1/projects/p1/jobs" >"$T/acks/$1" 2>/dev/null
}
export -f submit_one
export T URL
xargs -P 24 -I{} bash -c 'submit_one {}' <"$T/ids" &
XPID=$!
# kill once some (not all) submissions were acknowledged
for _ in $(seq 1 400); do
    n=$(grep -l '^200$' "$T"/acks/* 2>/dev/null | wc -l)
    [ "$n" -ge $((N / 4)) ] && break
    sleep 0.01
done
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
wait "$XPID"
acked=$(grep -l '^200$' "$T"/acks/* | xargs -n1 basename | sort)
nacked=$(printf '%s\n' "$acked" | grep -c .)
echo "  $nacked of $N creates acknowledged before kill -9" >&2
check "some acknowledged ($nacked)" test "$nacked" -gt 0
check "not all acknowledged: the kill landed mid-way ($nacked)" test "$nacked" -lt "$N"

start_kilnd "$T/d"
api GET "/v1/projects/p1/jobs?pageSize=100"
all=""
tok=""
for _ in $(seq 1 20); do
    api GET "/v1/projects/p1/jobs?pageSize=100${tok:+&pageToken=$tok}"
    all="$all $(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(" ".join(j["jobId"] for j in json.load(sys.stdin).get("jobs",[])))')"
    tok=$(printf '%s' "$BODY" | jget nextPageToken)
    [ -z "$tok" ] && break
done
listed=$(printf '%s\n' $all | sort)
dups=$(printf '%s\n' "$listed" | uniq -d | grep -c .)
check_eq "no job listed twice" "$dups" 0
missing=0
for id in $acked; do
    grep -qx "crash_$id" <<<"$listed" || missing=$((missing + 1))
done
check_eq "every acknowledged job survived kill -9" "$missing" 0
# and each of them is whole: readable and in a valid state
bad=0
for id in $(printf '%s\n' $acked | head -20); do
    s=$(job_state "crash_$id")
    case "$s" in QUEUED | PREPARING | RUNNING | SUCCEEDED) ;; *) bad=$((bad + 1)) ;; esac
done
check_eq "acknowledged jobs readable" "$bad" 0
# the jobs interrupted in RUNNING/PREPARING are run again and finish
for _ in $(seq 1 400); do
    api GET "/v1/projects/p1/jobs?filter=state:QUEUED&pageSize=1"
    a=$(printf '%s' "$BODY" | jget jobs)
    api GET "/v1/projects/p1/jobs?filter=state:RUNNING&pageSize=1"
    b=$(printf '%s' "$BODY" | jget jobs)
    [ -z "$a$b" ] && break
    sleep 0.05
done
check_eq "every job ran to the end after the restart" "$a$b" ""

# 2. adoption: a running job with a child process outlives a kilnd crash
# (its monitor holds it) and the next kilnd adopts it, restarts unchanged
MARK="kiln_it_marker_$$_$RANDOM"
api POST /v1/projects/p1/jobs "$(job_json adopt_1 "echo started; sleep 300 # $MARK")"
check "adopt_1 running" wait_state adopt_1 RUNNING 10
api GET /v1/projects/p1/jobs/adopt_1
leader=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.pid)
for _ in $(seq 1 100); do pgrep -f "$MARK" >/dev/null && break; sleep 0.05; done
before=$(pgrep -P "$leader" | head -1) # the shell's sleep
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
sleep 0.3
check "the replica outlived kilnd" kill -0 "$leader"
start_kilnd "$T/d"
check "adopt_1 still running" wait_state adopt_1 RUNNING 10
api GET /v1/projects/p1/jobs/adopt_1
check_eq "no restart counted" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 0
check_eq "the same process" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.pid)" "$leader"
check_eq "its child is the same too" "$(pgrep -P "$leader" | head -1)" "$before"
count=$(pgrep -fc "^sh -c echo started; sleep 300 # $MARK") # (its monitor names it too)
check_eq "exactly one copy of the replica runs" "$count" 1
check "adoption logged" grep -q "kilnd restarted: adopted" "$T/d/jobs/p1/adopt_1/log.tsv"
api POST /v1/projects/p1/jobs/adopt_1:cancel '{}'
check "adopt_1 cancelled" wait_state adopt_1 CANCELLED 10
sleep 0.2
check_eq "no replica left after cancel" "$(pgrep -fc "$MARK")" 0

# 2b. a replica whose monitor is gone is judged by its restart policy
# (ExitCode: counted as killed, 137, retried), never left running unseen
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"lost_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"restartPolicy":"ExitCode","containerCommand":["sh","-c","if [ -e %s/lost.once ]; then exit 0; fi; touch %s/lost.once; sleep 300 # %s"]}}}' "$T" "$T" "$MARK-lost")"
check "lost_1 running" wait_state lost_1 RUNNING 10
mon=$(awk '/^monitor/ {print $2}' "$T/d/jobs/p1/lost_1/replicas/master-replica-0.state")
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
kill -9 "$mon"
start_kilnd "$T/d"
check "lost_1 restarted by its policy and SUCCEEDED" wait_state lost_1 SUCCEEDED 15
check "the reason names the monitor" grep -q "monitor is gone" "$T/d/jobs/p1/lost_1/log.tsv"
check_eq "the old replica was stopped" "$(pgrep -fc "$MARK-lost")" 0

# 3. a full disk for the logs: a tiny tmpfs is not available unprivileged
# everywhere, so /dev/full stands in for the job's log file
mkdir -p "$T/d/jobs/p1/fulldisk"
ln -s /dev/full "$T/d/jobs/p1/fulldisk/log.tsv"
api POST /v1/projects/p1/jobs "$(job_json fulldisk 'for i in $(seq 1 2000); do echo line $i; done')"
check "job with an unwritable log still succeeds" wait_state fulldisk SUCCEEDED 20
check "kilnd alive" kill -0 "$KPID"

# 4. a chatty program cannot fill the disk: --log-cap bounds a job's log
OLDURL=$URL
start_kilnd "$T/capped" --log-cap 20000
api POST /v1/projects/p1/jobs "$(job_json chatty 'i=0; while [ $i -lt 5000 ]; do echo "line $i of chatter"; i=$((i+1)); done')"
check "chatty job succeeds" wait_state chatty SUCCEEDED 30
size=$(wc -c <"$T/capped/jobs/p1/chatty/log.tsv")
check "log stays near the cap ($size bytes)" test "$size" -lt 30000
check "cap announced" grep -q "log cap of 20000 bytes reached" "$T/capped/jobs/p1/chatty/log.tsv"
check "job end still logged" grep -q "completed successfully" "$T/capped/jobs/p1/chatty/log.tsv"
URL=$OLDURL

finish

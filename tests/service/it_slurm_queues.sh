#!/bin/bash
# tests/service/it_slurm_queues.sh - `kilnd --executor slurm --slurm-queues accounts --queues FILE`:
# Kueue's file carried out with Slurm's own accounting, on the two-node
# test cluster (4 GPUs) with slurmdbd and its own MariaDB
# (slurm_cluster.sh --accounting; docs/slurm.md, "Queues"):
#   - kilnd makes each ClusterQueue an account (sacctmgr show assoc:
#     GrpTRES=gres/gpu=2, Fairshare from fairSharing.weight), each
#     LocalQueue's project's user an association to it, the priority class a
#     QOS with its Priority;
#   - team A's three 1-GPU jobs: two run, the third waits with Slurm's reason
#     (AssocGrpGRES) naming ClusterQueue team-a in kilnStatus, while team B's
#     job starts at once; when an A job ends, the third runs;
#   - jobs' allocations go with --account=<ClusterQueue> and
#     --qos=<priority class> (kiln's one supervisor asks, Slurm admits);
#   - SIGHUP applies stopPolicy: Hold (GrpJobs=0: b1 runs on, b2 waits,
#     saying its ClusterQueue is held), then a changed quota (GrpTRES);
#   - with the projects' own Unix user (tokens file 'project P user U'), the
#     associations are U's and U's job runs in account team-b;
#   - a field Slurm makes meaningless (cohort) is refused at start, and a
#     sacctmgr failure stops kilnd's start naming the account.
# Skipped (77) with the reason where Slurm or its accounting cannot run here
# (probes `slurm`, `slurmdbd`, `runas`).
PORT_RANGE=41000-41799 # the cluster's own daemons listen on 41900-41992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod slurmdbd runas
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 41900 41992 --accounting

flavor() {
    printf 'apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: t4\n'
}
cq() { # cq NAME GPUS [SPEC LINES]
    printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: %s\nspec:\n  namespaceSelector: {}\n%s  resourceGroups:\n  - coveredResources: ["nvidia.com/gpu"]\n    flavors:\n    - name: t4\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: %s\n' \
        "$1" "${3:-}" "$2"
}
lq() { # lq PROJECT CLUSTERQUEUE
    printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata:\n  namespace: %s\n  name: default\nspec:\n  clusterQueue: %s\n' "$1" "$2"
}
pc() { # pc NAME VALUE
    printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata:\n  name: %s\nvalue: %s\n' "$1" "$2"
}
write_queues() { # write_queues TEAM_B_GPUS [TEAM_B SPEC LINES]: $T/queues.yaml
    { flavor; cq team-a 2; cq team-b "$1" "  fairSharing:\n    weight: 3\n${2:-}"; lq team-a team-a
        lq team-b team-b; pc urgent 100; } | sed 's/\\n/\n/g' >"$T/q.new"
    mv "$T/q.new" "$T/queues.yaml"
}
write_queues 2

KILND_SLURM=(--executor slurm --slurm-queues accounts --slurm-partition kiln --kiln-train "$BUILD/bin/kiln-train"
    --slurm-gpu-type NVIDIA_TESLA_T4=t4)
# the starts that must fail, as start_kilnd starts kilnd
root_ok=()
[ "$(id -u)" = 0 ] && root_ok=(--allow-root-replicas yes)

# ---- refused at start: what Slurm makes meaningless; sacctmgr's failure ----
{ cat "$T/queues.yaml"; } | sed 's/^  namespaceSelector: {}$/  namespaceSelector: {}\n  cohort: lab/' >"$T/cohort.yaml"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/bad1" "${root_ok[@]}" "${KILND_SLURM[@]}" --queues "$T/cohort.yaml" 2>"$T/bad1.err"
check_eq "a cohort under Slurm: kilnd does not start" "$?" 1
check "it names the field and why" grep -q "ClusterQueue team-a: spec.cohort: meaningless in Slurm" "$T/bad1.err"
{ flavor; cq team-c 1; lq team-c team-c; } | sed 's/\\n/\n/g' >"$T/noparent.yaml"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/bad2" "${root_ok[@]}" "${KILND_SLURM[@]}" --slurm-account no-such-parent \
    --queues "$T/noparent.yaml" 2>"$T/bad2.err"
check_eq "sacctmgr fails (no parent account): kilnd does not start" "$?" 1
check "it names the account it could not make" grep -q "sacctmgr could not make account team-c (ClusterQueue team-c" "$T/bad2.err"
check "no account team-c was made" test -z "$(sacctmgr -n -P list account team-c format=account)"

# ---- the accounts, associations and QOS ----
start_kilnd "$T/d" "${KILND_SLURM[@]}" --queues "$T/queues.yaml"
assoc() { sacctmgr -n -P show assoc where account="$1" format=account,user,grptres,fairshare,qos; }
check_eq "account team-a: GrpTRES gres/gpu=2" "$(assoc team-a | awk -F'|' '$2==""{print $3}')" "gres/gpu=2"
check_eq "account team-b: GrpTRES gres/gpu=2, Fairshare 3 (fairSharing.weight)" \
    "$(assoc team-b | awk -F'|' '$2==""{print $3, $4}')" "gres/gpu=2 3"
me=$(id -un)
check "project team-a's user ($me) is associated to team-a, allowed QOS urgent" \
    grep -qE "^team-a\|$me\|.*urgent" <<<"$(assoc team-a)"
check_eq "sshare: team-b's raw shares are 3" "$(sshare -n -P -A team-b -o Account,RawShares | awk -F'|' '$1=="team-b"{print $2; exit}')" 3
check_eq "QOS urgent: Priority 100" "$(sacctmgr -n -P show qos urgent format=name,priority)" "urgent|100"

gjob() { # gjob ID COMMAND [LABELS]
    printf '{"jobId":"%s","labels":%s,"trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c","%s"]}}}' \
        "$1" "${3:-{\}}" "$2"
}
st() { api GET "/v1/projects/$1/jobs/$2"; printf '%s' "$BODY" | jget state; }
wait_st() { # wait_st PROJECT JOB STATE [SECONDS]
    local s=""
    for _ in $(seq 1 $(( ${4:-30} * 10 ))); do
        s=$(st "$1" "$2")
        [ "$s" = "$3" ] && return 0
        sleep 0.1
    done
    echo "  job $1/$2 is '$s', waited for '$3'" >&2
    return 1
}
# a job that runs until its file appears (the nodes share this file system)
hold() { echo "while [ ! -e $T/end-$1 ]; do sleep 0.2; done"; }

for a in a1 a2; do
    api POST /v1/projects/team-a/jobs "$(gjob $a "$(hold $a)")"
    check_eq "team-a $a: created" "$STATUS" 200
done
check "a1 RUNNING" wait_st team-a a1 RUNNING 30
check "a2 RUNNING" wait_st team-a a2 RUNNING 30
api POST /v1/projects/team-a/jobs "$(gjob a3 "$(hold a3)" '{"kueue.x-k8s.io/priority-class":"urgent"}')"
check_eq "team-a a3: created" "$STATUS" 200
# the third waits on team-a's GrpTRES: Slurm's reason, and kiln's words for it
reason=
for _ in $(seq 1 100); do
    api GET /v1/projects/team-a/jobs/a3
    reason=$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)
    case $reason in *AssocGrpGRES*) break ;; esac
    sleep 0.1
done
check_eq "a3 QUEUED" "$(printf '%s' "$BODY" | jget state)" QUEUED
check "a3's kilnStatus says Slurm's reason and team-a's quota ($reason)" \
    grep -q "AssocGrpGRES.*ClusterQueue team-a's quota is in use (Slurm account team-a, GrpTRES=gres/gpu=2" <<<"$reason"
check_eq "a3's kilnStatus names its ClusterQueue" "$(printf '%s' "$BODY" | jget kilnStatus.queue.clusterQueue)" team-a
check_eq "squeue: a3 pends on AssocGrpGRES in account team-a with QOS urgent" \
    "$(squeue -h -n kiln-team-a-a3 -o '%a %q %T %r' 2>/dev/null | head -1)" "team-a urgent PENDING AssocGrpGRES"
# kiln queues describe: Slurm's count of the account (scontrol show assoc_mgr)
qd=
for _ in $(seq 1 50); do
    api GET /v1/queues/team-a
    qd=$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
c = json.load(sys.stdin)
print(c["resourceGroups"][0]["flavors"][0]["resources"][0]["usage"], c["admittedWorkloads"], c["pendingWorkloads"])')
    [ "$qd" = "2 2 1" ] && break
    sleep 0.1
done
check_eq "GET /v1/queues/team-a: usage 2 GPUs, 2 admitted, 1 pending (Slurm's)" "$qd" "2 2 1"
check_eq "kiln queues list: team-a 1 pending, 2 admitted, 2/2 GPUs" \
    "$("$KILN" queues list | awk '$1=="team-a"{print $3, $4, $5}')" "1 2 2/2"
# team B's job starts at once: 2 of the 4 GPUs are free and team-b's quota is its own
t0=$(date +%s%N)
api POST /v1/projects/team-b/jobs "$(gjob b1 "$(hold b1)")"
check_eq "team-b b1: created" "$STATUS" 200
check "b1 RUNNING while a3 waits" wait_st team-b b1 RUNNING 15
ms=$((($(date +%s%N) - t0) / 1000000))
echo "b1 (team-b) RUNNING $ms ms after its create, with team-a's third job waiting"
check "b1 started within 15 s ($ms ms)" test "$ms" -le 15000
check_eq "a3 still QUEUED" "$(st team-a a3)" QUEUED
check_eq "b1's allocation went with --account=team-b (and no QOS of a priority class)" \
    "$(squeue -h -n kiln-team-b-b1 -o '%a %q' 2>/dev/null | head -1)" "team-b normal"

# one A job ends: the third runs
touch "$T/end-a1"
check "a1 SUCCEEDED" wait_st team-a a1 SUCCEEDED 30
check "a3 RUNNING once a1 ended" wait_st team-a a3 RUNNING 30
check_eq "Slurm runs 2 of team-a's jobs, 1 of team-b's" \
    "$(squeue -h -t RUNNING -o '%a' 2>/dev/null | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')" "team-a=2 team-b=1 "

# ---- SIGHUP: team-b held (stopPolicy: Hold is its account's GrpJobs=0):
# its running job runs on, a new one waits; then released with a quota of 1 ----
grpjobs() { sacctmgr -n -P show assoc where account="$1" format=user,grpjobs | awk -F'|' '$1==""{print $2}'; }
reason_of() { # reason_of PROJECT JOB PATTERN: waits up to 10 s for kilnStatus.queue.reason to match
    local r=
    for _ in $(seq 1 100); do
        api GET "/v1/projects/$1/jobs/$2"
        r=$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)
        grep -q "$3" <<<"$r" && { echo "$r"; return 0; }
        sleep 0.1
    done
    echo "$r"
    return 1
}
write_queues 2 '  stopPolicy: Hold\n'
kill -HUP "$KPID"
for _ in $(seq 1 100); do [ "$(grpjobs team-b)" = 0 ] && break; sleep 0.1; done
check_eq "SIGHUP with Hold: account team-b's GrpJobs is 0" "$(grpjobs team-b)" 0
api POST /v1/projects/team-b/jobs "$(gjob b2 "$(hold b2)")"
check_eq "team-b b2: created" "$STATUS" 200
r=$(reason_of team-b b2 "ClusterQueue team-b is held")
check "b2 waits: its ClusterQueue is held ($r)" grep -q "AssocGrpJobsLimit.*ClusterQueue team-b is held (stopPolicy: Hold" <<<"$r"
check_eq "b1 runs on while team-b is held" "$(st team-b b1)" RUNNING
check_eq "b2 QUEUED while held" "$(st team-b b2)" QUEUED
write_queues 1
kill -HUP "$KPID"
ok_hup=
for _ in $(seq 1 100); do
    [ "$(assoc team-b | awk -F'|' '$2==""{print $3}')" = "gres/gpu=1" ] && [ -z "$(grpjobs team-b)" ] && { ok_hup=1; break; }
    sleep 0.1
done
check "SIGHUP: account team-b's GrpTRES is gres/gpu=1, its hold lifted" test -n "$ok_hup"
check "SIGHUP: team-a's is still gres/gpu=2" test "$(assoc team-a | awk -F'|' '$2==""{print $3}')" = "gres/gpu=2"
# released, b2 would start at once with a quota of 2 (3 of the 4 GPUs are
# in use): with 1, b1's, it stays QUEUED (Slurm may keep its last reason)
sleep 3
check_eq "b2 still QUEUED on team-b's quota of 1, b1 holding it" "$(st team-b b2)" QUEUED
touch "$T/end-b1"
check "b2 RUNNING once b1 ended" wait_st team-b b2 RUNNING 30

touch "$T/end-a2" "$T/end-a3" "$T/end-b2"
check "a3 SUCCEEDED" wait_st team-a a3 SUCCEEDED 30
check "b1 SUCCEEDED" wait_st team-b b1 SUCCEEDED 30
check "b2 SUCCEEDED" wait_st team-b b2 SUCCEEDED 30
stop_kilnd

# ---- the projects' own user: the associations are U's, and Slurm runs U's
# job in account team-b (it would refuse one without the association) ----
U=kilnq$$
useradd -r -M -s /usr/sbin/nologin "$U" || {
    fail "useradd $U"
    finish
}
AT_EXIT="$AT_EXIT; userdel $U >/dev/null 2>&1"
chmod 711 "$CLUSTER/munge"
chmod 755 "$T" # the user's replicas reach the data dir below it
TOKEN=tok-editor-0123456789abcdef
printf '%s * editor\nproject team-a user %s\nproject team-b user %s\n' "$TOKEN" "$U" "$U" >"$T/tokens"
chmod 600 "$T/tokens"
export TOKEN
NO_ROOT_OK=1 start_kilnd "$T/d2" "${KILND_SLURM[@]}" --queues "$T/queues.yaml" --tokens "$T/tokens"
check "user $U is associated to team-a and team-b" \
    test "$( (assoc team-a; assoc team-b) | awk -F'|' -v u="$U" '$2==u{print $1}' | tr '\n' ' ')" = "team-a team-b "
api POST /v1/projects/team-b/jobs "$(gjob asu 'echo RUNS_AS $(id -un)')"
check_eq "team-b asu: created" "$STATUS" 200
check "asu SUCCEEDED" wait_st team-b asu SUCCEEDED 60
check "asu ran as $U" grep -q "RUNS_AS $U$" "$T/d2/jobs/team-b/asu/log.tsv"
acct=
for _ in $(seq 1 50); do
    acct=$(sacct -n -P -X --name=kiln-team-b-asu -o Account,User 2>/dev/null | head -1)
    [ -n "$acct" ] && break
    sleep 0.1
done
check_eq "sacct: Slurm ran it in account team-b as $U" "$acct" "team-b|$U"
stop_kilnd

# ---- an account Slurm refuses: the job waits, its log saying Slurm's words ----
# (--slurm-account without --queues: every allocation is charged to it, and
# this cluster enforces associations)
start_kilnd "$T/d3" --executor slurm --slurm-partition kiln --slurm-gpu-type NVIDIA_TESLA_T4=t4 \
    --slurm-account no-such-account "${root_ok[@]}"
api POST /v1/projects/p1/jobs "$(gjob refused 'echo never')"
check_eq "a job charged to an unknown account: created" "$STATUS" 200
check "its log says Slurm's answer" wait_file "$T/d3/jobs/p1/refused/log.tsv" "Slurm refused its allocation (sbatch: .*Invalid account" 30
check_eq "it waits" "$(st p1 refused)" QUEUED
sleep 2 # several passes, each asking again
check_eq "told once, not at every pass" "$(grep -c 'Slurm refused its allocation' "$T/d3/jobs/p1/refused/log.tsv")" 1
finish

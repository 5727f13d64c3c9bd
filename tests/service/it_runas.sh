#!/bin/bash
# tests/service/it_runas.sh - replicas run as their project's Unix user:
#   - "project P user U" in the tokens file: the replica's uid/gid are U's,
#     the job dir and log files are U's, the tokens file is out of its reach,
#     and nothing of kilnd's environment beyond the allow-list reaches it
#     (processes, and containers where podman runs);
#   - kilnd as root refuses the jobs of a project that names no user (they
#     would run as root) when they are created, unless the site allowed it.
#   - "serviceaccount SA project P user U2": a job of P whose serviceAccount
#     is SA runs as U2 (a process and its job directory), as a Vertex job
#     runs as its service account; an account no line maps is refused at
#     create, naming serviceAccount and the line to add.
# Creates two users with useradd (as root) and removes them at the end.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need runas

U=kilnrun$$
useradd -r -M -s /usr/sbin/nologin "$U" || {
    fail "useradd $U"
    finish
}
U2=kilnsa$$
useradd -r -M -s /usr/sbin/nologin "$U2" || {
    userdel "$U" >/dev/null 2>&1
    fail "useradd $U2"
    finish
}
AT_EXIT="userdel $U >/dev/null 2>&1; userdel $U2 >/dev/null 2>&1"
uid=$(id -u "$U")
gid=$(id -g "$U")
uid2=$(id -u "$U2")
gid2=$(id -g "$U2")
chmod 755 "$T"
TOKEN=tok-editor-0123456789abcdef
SA=trainer@p1.iam.gserviceaccount.com
printf '%s * editor\nproject p1 user %s\nserviceaccount %s project p1 user %s\n' "$TOKEN" "$U" "$SA" "$U2" >"$T/tokens"
chmod 600 "$T/tokens"
export TOKEN
CTR=""
if sh "$(dirname "$0")/../lib/probe.sh" check podman >/dev/null 2>&1; then
    IMG=kiln-it-runas-$$:1
    make_image "$IMG" && CTR=1
fi
# a secret in kilnd's environment must not reach a replica
KILN_IT_SECRET=hush NO_ROOT_OK=1 start_kilnd "$T/d" --tokens "$T/tokens"

script="echo \"IDS \$(id -u) \$(id -g)\"; echo \"SECRET=\${KILN_IT_SECRET:-none}\"; if cat $T/tokens >/dev/null 2>&1; then echo TOKENS_READABLE; else echo TOKENS_HIDDEN; fi; echo \"HOME=\$HOME USER=\$USER\""
api POST /v1/projects/p1/jobs "$(job_json as_user "$script")"
check_eq "job accepted" "$STATUS" 200
check "as_user SUCCEEDED" wait_state as_user SUCCEEDED 20
LOG=$T/d/jobs/p1/as_user/log.tsv
check "the replica ran as the project's user" grep -q "	IDS $uid $gid$" "$LOG"
check "kilnd's environment did not reach it" grep -q "	SECRET=none$" "$LOG"
check "the tokens file is out of its reach" grep -q "	TOKENS_HIDDEN$" "$LOG"
check "USER is the project's user" grep -q "USER=$U$" "$LOG"
check_eq "the job dir is the user's" "$(stat -c %u "$T/d/jobs/p1/as_user")" "$uid"
check_eq "the work dir is the user's" "$(stat -c %u "$T/d/jobs/p1/as_user/work")" "$uid"
check_eq "the replica's log is the user's" "$(stat -c %u "$T/d/jobs/p1/as_user/replicas/master-replica-0.log")" "$uid"

# securityContext capabilities.drop on a process: the monitor (root) takes
# them off the bounding set before it becomes the user, so nothing the
# replica runs can hold them (bit 13 NET_RAW, bit 21 SYS_ADMIN; CapBnd is hex)
capjob() { # capjob ID DROP-JSON
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","grep CapBnd /proc/self/status"],"securityContext":{"capDrop":%s}}}}' "$1" "$2"
}
capbit() { # capbit JOB BIT: 1 when the replica's bounding set holds it
    local hex
    hex=$(sed -n 's/.*CapBnd:[[:space:]]*\([0-9a-f]*\)$/\1/p' "$T/d/jobs/p1/$1/log.tsv" | head -1)
    [ -n "$hex" ] || { echo none; return; }
    echo $(((16#$hex >> $2) & 1))
}
api POST /v1/projects/p1/jobs "$(capjob cap_raw '["NET_RAW"]')"
check_eq "capDrop NET_RAW on a process: accepted" "$STATUS" 200
api POST /v1/projects/p1/jobs "$(capjob cap_all '["ALL"]')"
api POST /v1/projects/p1/jobs "$(capjob cap_none '[]')"
for j in cap_raw cap_all cap_none; do check "$j SUCCEEDED" wait_state "$j" SUCCEEDED 20; done
check_eq "NET_RAW is off the replica's bounding set" "$(capbit cap_raw 13)" 0
check_eq "and SYS_ADMIN still on it" "$(capbit cap_raw 21)" 1
check_eq "ALL: an empty bounding set" "$(sed -n 's/.*CapBnd:[[:space:]]*\([0-9a-f]*\)$/\1/p' "$T/d/jobs/p1/cap_all/log.tsv")" 0000000000000000
check_eq "no capDrop: NET_RAW on the bounding set" "$(capbit cap_none 13)" 1
api POST /v1/projects/p1/jobs "$(capjob cap_bad '["NET_RAWW"]')"
check_eq "an unknown capability: 400" "$STATUS" 400

if [ -n "$CTR" ]; then
    api POST /v1/projects/p1/jobs '{"jobId":"ctr_user","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"imageUri":"localhost/'"$IMG"'","containerCommand":["sh","-c","echo IDS $(id -u) $(id -g)"]}}}'
    check "ctr_user SUCCEEDED" wait_state ctr_user SUCCEEDED 30
    check "the container ran as the project's user" grep -q "	IDS $uid $gid$" "$T/d/jobs/p1/ctr_user/log.tsv"
fi

# serviceAccount: the mapped account's user runs the replica
api POST /v1/projects/p1/jobs "$(job_json as_sa 'echo "IDS $(id -u) $(id -g)"' ",\"serviceAccount\":\"$SA\"")"
check_eq "a mapped serviceAccount: accepted" "$STATUS" 200
check "as_sa SUCCEEDED" wait_state as_sa SUCCEEDED 20
check "the replica ran as the account's user" grep -q "	IDS $uid2 $gid2$" "$T/d/jobs/p1/as_sa/log.tsv"
check_eq "its job directory is the account's user's" "$(stat -c %u "$T/d/jobs/p1/as_sa")" "$uid2"
api POST /v1/projects/p1/jobs "$(job_json as_other 'id -u' ',"serviceAccount":"other@p1.iam.gserviceaccount.com"')"
check_eq "an unmapped serviceAccount: 400" "$STATUS" 400
check "... naming it and the line to add" grep -q "serviceAccount other@p1.iam.gserviceaccount.com: .*'serviceaccount other@p1.iam.gserviceaccount.com project p1 user U'" <<<"$(printf '%s' "$BODY" | jget error.message)"
# the mapping is per project: p1's account means nothing for p2
api POST /v1/projects/p2/jobs "$(job_json sa_p2 'id -u' ",\"serviceAccount\":\"$SA\"")"
check_eq "p1's account in project p2: 400" "$STATUS" 400

# a project with no user: kilnd (root) refuses its jobs when they are
# created, rather than run their replicas as root (tests/service/it_root.sh
# has the other cases)
api POST /v1/projects/p2/jobs "$(job_json as_root 'id -u')"
check_eq "p2 job refused at create" "$STATUS" 400
check "the reason says why and what to do" grep -q "would run project p2's replicas as root.*'project p2 user U'.*--allow-root-replicas yes" <<<"$(printf '%s' "$BODY" | jget error.message)"
check "kilnd said so at start" grep -q "will refuse every job of a project other than p1" "$T/d/kilnd.err"

finish

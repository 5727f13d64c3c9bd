#!/bin/bash
# tests/service/it_slurm_parity.sh - what runs on one machine runs under
# `kilnd --executor slurm` too (kiln's one supervisor, each job's gang one
# Slurm allocation), on the two-node test cluster
# (tests/service/slurm_cluster.sh):
#   - per-project Unix users: kilnd (root) submits a project's job for its
#     user (its allocation's sbatch --uid/--gid): the replicas run with that user's uid, gid,
#     HOME and USER, the job's directories are the user's; a project with no
#     user is refused at create (its replicas would run as root);
#   - runPolicy.activeDeadlineSeconds: a job active longer FAILS with
#     DeadlineExceeded, its Slurm job stopped;
#   - runPolicy.ttlSecondsAfterFinished: a finished job's files are cleaned
#     after the TTL, its log kept, as on one machine.
# Skipped (77) with the reason where Slurm cannot run here (probe `slurm`).
PORT_RANGE=55000-55799 # the cluster's own daemons listen on 55900-55992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod runas
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 55900 55992
# the user's srun reaches munged's socket (the key stays root's alone)
chmod 711 "$CLUSTER/munge"

U=kilnslurm$$
useradd -r -M -s /usr/sbin/nologin "$U" || {
    fail "useradd $U"
    finish
}
AT_EXIT="$AT_EXIT; userdel $U >/dev/null 2>&1"
uid=$(id -u "$U")
gid=$(id -g "$U")
chmod 755 "$T" # the user's replicas reach the data dir below it
TOKEN=tok-editor-0123456789abcdef
printf '%s * editor\nproject p1 user %s\n' "$TOKEN" "$U" >"$T/tokens"
chmod 600 "$T/tokens"
export TOKEN
NO_ROOT_OK=1 start_kilnd "$T/d" --executor slurm --slurm-partition kiln \
    --kiln-train "$BUILD/bin/kiln-train" --tokens "$T/tokens"

# ---- per-project users ----
script='echo "IDS $(id -u) $(id -g)"; echo "HOME=$HOME USER=$USER"; touch "$PWD/made-by-replica"'
api POST /v1/projects/p1/jobs "$(job_json as_user "$script")"
check_eq "as_user accepted" "$STATUS" 200
check "as_user SUCCEEDED" wait_state as_user SUCCEEDED 90
J=$T/d/jobs/p1/as_user
check "the replica ran as the project's user" grep -q "	IDS $uid $gid$" "$J/log.tsv"
check "HOME and USER are the user's" grep -q "	HOME=$(getent passwd "$U" | cut -d: -f6) USER=$U$" "$J/log.tsv"
check_eq "the job dir is the user's" "$(stat -c %u "$J")" "$uid"
check_eq "the work dir is the user's" "$(stat -c %u "$J/work")" "$uid"
check_eq "the replica's file is the user's" "$(stat -c %u "$J/work/made-by-replica" 2>/dev/null)" "$uid"
check_eq "the allocation's directory is the user's" "$(stat -c %u "$J"/slurm/kiln-p1-as_user)" "$uid"
check_eq "its batch script ran as the user (it wrote the layout)" "$(stat -c %u "$J"/slurm/kiln-p1-as_user/layout.* 2>/dev/null)" "$uid"
# a project with no user: its replicas would run as root
api POST /v1/projects/p2/jobs "$(job_json as_root 'id -u')"
check_eq "p2 job refused at create" "$STATUS" 400
check "the reason names the tokens file line" grep -q "would run project p2's replicas as root.*'project p2 user U'" <<<"$(printf '%s' "$BODY" | jget error.message)"

# ---- runPolicy.activeDeadlineSeconds ----
api POST /v1/projects/p1/jobs "$(job_json deadline_1 'echo up; sleep 120' ',"runPolicy":{"activeDeadlineSeconds":"3"}')"
check_eq "deadline_1 accepted" "$STATUS" 200
check "deadline_1 RUNNING" wait_state deadline_1 RUNNING 60
t0=$(date +%s)
check "deadline_1 FAILED" wait_state deadline_1 FAILED 40
check "within the deadline, the grace period and a little" test $(($(date +%s) - t0)) -le 20
api GET /v1/projects/p1/jobs/deadline_1
check "errorMessage says DeadlineExceeded" grep -q "DeadlineExceeded: the job was active longer than runPolicy.activeDeadlineSeconds (3s)" <<<"$(printf '%s' "$BODY" | jget errorMessage)"
gone=""
for _ in $(seq 1 100); do
    [ -z "$(squeue -h -n kiln-p1-deadline_1 -o %T 2>/dev/null | grep -E 'RUNNING|PENDING|CONFIGURING')" ] && gone=1 && break
    sleep 0.2
done
check "its Slurm allocation was given back" test -n "$gone"
check "the stop is logged" grep -q "DeadlineExceeded" "$T/d/jobs/p1/deadline_1/log.tsv"

# ---- runPolicy.ttlSecondsAfterFinished ----
api POST /v1/projects/p1/jobs "$(job_json ttl_1 'echo ttl-ran' ',"runPolicy":{"ttlSecondsAfterFinished":"2"}')"
check_eq "ttl_1 accepted" "$STATUS" 200
check "ttl_1 SUCCEEDED" wait_state ttl_1 SUCCEEDED 90
J=$T/d/jobs/p1/ttl_1
cleaned=""
for _ in $(seq 1 150); do
    [ ! -e "$J/work" ] && [ ! -e "$J/slurm" ] && cleaned=1 && break
    sleep 0.1
done
check "the job's files were cleaned after the TTL" test -n "$cleaned"
check "its log stays" grep -q "	ttl-ran$" "$J/log.tsv"
check "the job's files of a job without a TTL stay" test -d "$T/d/jobs/p1/as_user/slurm"
finish

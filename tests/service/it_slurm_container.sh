#!/bin/bash
# tests/service/it_slurm_container.sh - replicas with an imageUri under
# `kilnd --executor slurm` (kiln's one supervisor; each replica a step of its
# gang's allocation): each runs in podman on its Slurm node, with the
# local container backend's arguments (tests/service/it_container.sh runs
# the same image on one machine), on the two-node test cluster:
#   1. master + worker containers across both nodes: SUCCEEDED, TF_CONFIG
#      right in both (the worker's read through the job dir, mounted at the
#      same path), containerCommand/containerArgs as ENTRYPOINT/CMD, the
#      program really in a container named and hostnamed kiln-P-J-TASK whose
#      own name resolves first (/etc/hosts), --init;
#   2. GPUs: the GPU Slurm gave the task goes in as --device
#      nvidia.com/gpu=N (Slurm's CUDA_VISIBLE_DEVICES; the test cluster's
#      GPUs are fake, so the runtime here is a wrapper that records its
#      arguments and drops --device before running podman), and the program
#      sees CUDA_VISIBLE_DEVICES=0;
#   3. cancel: SIGTERM reaches the program in its container; one that
#      ignores it is killed after the grace period, its container gone;
#   4. a project with its own Unix user is refused an image at create
#      (Slurm lets only the allocation's owner start its steps: podman
#      would be rootless);
#   5. an elastic PyTorchJob whose workers are containers (min 1, max 2):
#      Worker 0 in the gang's allocation and Worker 1 in one of its own
#      (kiln-P-J-w0: the Worker role's replica 0,
#      PyTorch's Worker 1), each running in podman, both given
#      Worker 0's rendezvous endpoint, the same id and 1:2 nodes, each
#      container its own name first in /etc/hosts (Worker 0 is kiln's
#      master-replica-0, Worker 1 worker-replica-0); SUCCEEDED.
# Skipped (77) where Slurm or podman cannot run here.
PORT_RANGE=54000-54799 # the cluster's own daemons listen on 54900-54992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod podman
HERE=$(cd "$(dirname "$0")" && pwd)
IMG=kiln-it-sctr-$$:1
make_image "$IMG" || {
    fail "cannot build the test image"
    finish
}
. "$HERE/slurm_lib.sh"
slurm_test_cluster 54900 54992

# the runtime: podman, through a wrapper that records each command line
# and leaves out --device (the cluster's GPUs are fake: no CDI spec)
slurm_podman_wrap
printf 'kiln-test-token-0123456789 * editor\nproject p9 user nobody\n' >"$T/tokens"
chmod 600 "$T/tokens"
# nobody must reach its job dirs under $T (mktemp -d: 700): kilnd checks at start
chmod 711 "$T"
TOKEN=kiln-test-token-0123456789
export TOKEN
start_kilnd "$T/d" --executor slurm --slurm-partition kiln --slurm-gpu-type NVIDIA_TESLA_T4=t4 \
    --container-runtime "$T/podman-wrap" --tokens "$T/tokens"
q() { printf '%s' "$1" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }
# ctr_job ID MASTER_SCRIPT WORKER_SCRIPT [extra trainingInput members] [extra masterConfig members]
ctr_job() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"imageUri":"localhost/%s","containerCommand":["sh","-c",%s]%s},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"containerCommand":["sh","-c",%s]}%s}}' \
        "$1" "$IMG" "$(q "$2")" "${5:-}" "$(q "$3")" "${4:-}"
}

# 1. master + worker in containers, through Slurm
JD=$T/jobdir
m='echo "MASTER_TF $TF_CONFIG"; echo "MASTER_ARGS $0 $*"; test -e /run/.containerenv && echo IN_CONTAINER
echo "HOSTNAME $(hostname)"; echo "HOSTS1 $(grep kiln- /etc/hosts | head -1 | tr "\t" " ")"; echo "PID1 $(cat /proc/1/comm)"
for i in $(seq 1 300); do [ -e '"$JD"'/worker.tf ] && break; sleep 0.1; done
echo "WORKER_TF $(cat '"$JD"'/worker.tf)"'
w='echo "$TF_CONFIG" > '"$JD"'/worker.tf; echo "WHOSTS1 $(grep kiln- /etc/hosts | head -1 | tr "\t" " ")"; echo worker-done'
body=$(ctr_job ctr_1 "$m" "$w" ',"jobDir":"'"$JD"'"' ',"containerArgs":["zero","one"]')
api POST /v1/projects/p1/jobs "$body"
check_eq "container job accepted" "$STATUS" 200
check "container job SUCCEEDED" wait_state ctr_1 SUCCEEDED 120
LOG=$T/d/jobs/p1/ctr_1/log.tsv
[ "$(job_state ctr_1)" = SUCCEEDED ] || tail -n 30 "$LOG" >&2
check "the master ran in a container" grep -q "master-replica-0	IN_CONTAINER" "$LOG"
check "an init is PID 1 (--init: catatonit, podman-init in podman 4)" grep -qE "master-replica-0	PID1 (catatonit|podman-init)$" "$LOG"
# a container's host name is its name made a DNS label (kiln_exec_container_hostname:
# ctr_1's '_' is not one, so a readable prefix and 8 hex digits of the whole name's hash)
check "its hostname is its container's name as a DNS label" grep -qE "master-replica-0	HOSTNAME kiln-p1-ctr-1-master-replica-0-[0-9a-f]{8}$" "$LOG"
check "its own name comes first in /etc/hosts" grep -qE "master-replica-0	HOSTS1 [0-9.]+ kiln-p1-ctr-1-master-replica-0-[0-9a-f]{8}$" "$LOG"
check "the worker's own name first in its /etc/hosts" grep -qE "worker-replica-0	WHOSTS1 [0-9.]+ kiln-p1-ctr-1-worker-replica-0-[0-9a-f]{8}$" "$LOG"
check "containerArgs then --job-dir as CMD" grep -q "MASTER_ARGS zero one --job-dir $JD" "$LOG"
tf_of() { # tf_of PREFIX -> "type index cluster-roles"
    grep -m1 "	$1 " "$LOG" | cut -f4- | sed "s/^$1 //" | "$PY" -c '
import json, sys
t = json.loads(sys.stdin.read())
print(t["task"]["type"], t["task"]["index"], ",".join(sorted(t["cluster"])), len(t["cluster"]["worker"]), t["environment"])'
}
check_eq "master's TF_CONFIG" "$(tf_of MASTER_TF)" "master 0 master,worker 1 cloud"
check_eq "worker's TF_CONFIG (through the mounted job dir)" "$(tf_of WORKER_TF)" "worker 0 master,worker 1 cloud"
check "podman run with the local backend's arguments" grep -qE -- "run --rm --replace --name kiln-p1-ctr_1-master-replica-0 --hostname kiln-p1-ctr-1-master-replica-0-[0-9a-f]{8} --init --pull never -w $T/d/jobs/p1/ctr_1/work" "$T/podman-args.log"
check "the image checked on the node first" grep -q "image exists localhost/$IMG" "$T/podman-args.log"
# the cluster's nodes are known by host name (NodeHostname=localhost, no
# NodeAddr): podman's --add-host gets the address kilnd resolved, never the
# name (podman refuses one: "invalid IP address in add-host")
check "--add-host gives the node's address, not its name" \
    grep -Eq -- '--add-host kiln-[^ ]*:127\.0\.0\.1( |$)' "$T/podman-args.log"
check "no --add-host with a node's name" sh -c "! grep -Eq -- '--add-host [^ ]*:localhost' '$T/podman-args.log'"

# 2. a GPU from Slurm: --device for the task's GPU, CUDA counts it as 0
api POST /v1/projects/p1/jobs '{"jobId":"gpu_1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"imageUri":"localhost/'"$IMG"'","acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c","echo CVD=$CUDA_VISIBLE_DEVICES"]}}}'
check_eq "gpu job accepted" "$STATUS" 200
check "gpu job SUCCEEDED" wait_state gpu_1 SUCCEEDED 90
check "the program sees its one GPU as 0" grep -q "master-replica-0	CVD=0$" "$T/d/jobs/p1/gpu_1/log.tsv"
check "podman was given the GPU Slurm gave the task" grep -qE -- "--name kiln-p1-gpu_1-master-replica-0 .*--device nvidia.com/gpu=[01] " "$T/podman-args.log"

# 3. cancel: SIGTERM reaches the program; one ignoring it is killed after
# the grace period (1 s here) and its container removed
api POST /v1/projects/p1/jobs "$(ctr_job polite "trap 'echo bye; exit 0' TERM; echo up; while true; do sleep 0.1; done" 'sleep 120')"
check "polite running" wait_state polite RUNNING 60
wait_file "$T/d/jobs/p1/polite/log.tsv" "	up$"
api POST /v1/projects/p1/jobs/polite:cancel '{}'
check "polite CANCELLED" wait_state polite CANCELLED 40
check "SIGTERM reached the program in the container" grep -q "master-replica-0	bye" "$T/d/jobs/p1/polite/log.tsv"
api POST /v1/projects/p1/jobs "$(ctr_job stubborn "trap '' TERM; echo up; while true; do sleep 0.1; done" 'sleep 120')"
check "stubborn running" wait_state stubborn RUNNING 60
wait_file "$T/d/jobs/p1/stubborn/log.tsv" "	up$"
api POST /v1/projects/p1/jobs/stubborn:cancel '{}'
check "stubborn CANCELLED" wait_state stubborn CANCELLED 60
left=1
for _ in $(seq 1 300); do
    left=$(podman ps -q --filter name=kiln-p1-stubborn 2>/dev/null | wc -l)
    [ "$left" = 0 ] && break
    sleep 0.1
done
check_eq "no container left" "$left" 0
for _ in $(seq 1 100); do
    left=$(podman ps -q --filter name=kiln-p1-polite 2>/dev/null | wc -l)
    [ "$left" = 0 ] && break
    sleep 0.1
done
check_eq "no container of polite left" "$left" 0

# 4. a project with its own user: only an allocation's owner may start steps
# in it, so podman would be rootless as that user
api POST /v1/projects/p9/jobs "$(ctr_job as_user 'true' 'true')"
check_eq "an image of a project with a user refused at create" "$STATUS" 400
check "the refusal names imageUri and why" grep -q "trainingInput.masterConfig.imageUri.*only an allocation's owner may start steps.*rootless podman" <<<"$BODY"
# a runtimeVersion runs in the catalog's image: the same
api POST /v1/projects/p9/jobs '{"jobId":"rt_user","trainingInput":{"scaleTier":"BASIC","region":"us-central1","runtimeVersion":"2.11","pythonModule":"trainer.task"}}'
check_eq "a runtimeVersion of a project with a user refused at create" "$STATUS" 400
check "the refusal names runtimeVersion" grep -q "trainingInput.runtimeVersion.*rootless podman" <<<"$BODY"

# 5. elastic workers in containers, each its own Slurm job (docs/slurm.md)
e='test -e /run/.containerenv && echo "ELC $KILN_TASK_NAME ep=$PET_RDZV_ENDPOINT id=$PET_RDZV_ID nn=$PET_NNODES"
echo "EHOSTS1 $(grep kiln- /etc/hosts | head -1 | tr "\t" " ")"
for i in $(seq 1 200); do [ "$(ls '"$T"'/elc.up.* 2>/dev/null | wc -l)" -ge 2 ] && break; touch '"$T"'/elc.up.$KILN_TASK_NAME; sleep 0.2; done; echo elc-done'
api POST /v1/projects/p1/jobs "{\"jobId\":\"elc_1\",\"trainingInput\":{\"scaleTier\":\"CUSTOM\",\"region\":\"us-central1\",\"masterType\":\"n1-standard-4\",\"masterConfig\":{\"imageUri\":\"localhost/$IMG\",\"containerCommand\":[\"sh\",\"-c\",$(q "$e")]},\"workerType\":\"n1-standard-4\",\"workerCount\":\"1\",\"workerConfig\":{\"imageUri\":\"localhost/$IMG\",\"containerCommand\":[\"sh\",\"-c\",$(q "$e")]},\"pytorchJob\":{\"workersOnly\":true,\"elasticPolicy\":{\"minReplicas\":\"1\",\"maxReplicas\":\"2\"}}}}"
check_eq "elastic container job accepted" "$STATUS" 200
check "elastic container job SUCCEEDED" wait_state elc_1 SUCCEEDED 150
ELOG=$T/d/jobs/p1/elc_1/log.tsv
[ "$(job_state elc_1)" = SUCCEEDED ] || tail -n 30 "$ELOG" >&2
eps=$(grep -o "ELC [^ ]* ep=[^ ]* id=[^ ]* nn=[^ ]*" "$ELOG" | sort -u)
check_eq "two workers ran in containers" "$(printf '%s\n' "$eps" | grep -c ELC)" 2
check_eq "both given one endpoint, one id, 1:2 nodes" "$(printf '%s\n' "$eps" | cut -d' ' -f3- | sort -u | wc -l)" 1
check "the id is the job's, the nodes 1:2" grep -q "id=elc_1 nn=1:2$" <<<"$eps"
# (every run of each: once, on a loaded machine, each container ran several
# times, restarted for a reason its lines did not show; see below)
check "each container's own name first in its /etc/hosts, every run" \
    test "$(grep -c "EHOSTS1" "$ELOG")" = "$(grep -cE "EHOSTS1 [0-9.]+ kiln-p1-elc-1-(master|worker)-replica-0-[0-9a-f]{8}$" "$ELOG")"
check_eq "both containers said so" "$(grep -oE "EHOSTS1 [0-9.]+ kiln-p1-elc-1-(master|worker)-replica-0-" "$ELOG" | sort -u | wc -l)" 2
# a container that ran more than once: the service's lines say why
[ "$(grep -c "EHOSTS1" "$ELOG")" = 2 ] || grep -E "	service	|EHOSTS1" "$ELOG" | cut -f2- >&2
check_eq "Worker 1 (worker-replica-0) came in an allocation of its own" "$(ls "$T"/d/jobs/p1/elc_1/slurm/kiln-p1-elc_1-w0/layout.* 2>/dev/null | wc -l)" 1
finish

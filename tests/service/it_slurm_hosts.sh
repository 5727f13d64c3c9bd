#!/bin/bash
# tests/service/it_slurm_hosts.sh - kilnd --executor slurm --slurm-launch
# steps on a test cluster of separate hosts (slurm_cluster.sh --netns: n1
# and n2 each in a network namespace of its own, with its own address on a
# bridge and its own host name; slurmctld and kilnd in this machine's root
# namespace, where the node names do not resolve). What the loopback
# cluster cannot tell apart (every node 127.0.0.1) must be right here:
#   a. a master and a worker, one per node (Slurm gives a heterogeneous
#      job's components no node in common): each runs on its node's host
#      name and address, TF_CONFIG names the two nodes' addresses (Slurm's
#      NodeAddr, not a name), and the worker opens a TCP connection to the
#      master's address:port from TF_CONFIG, where the master listens;
#   b. a PyTorchJob-style job: MASTER_ADDR is the master node's address and
#      the worker reaches MASTER_ADDR:MASTER_PORT;
#   c. with podman: master and worker containers on the two nodes, each
#      container's /etc/hosts giving its peer's name the peer node's address;
#   d. a tuning job: 4 trials, 2 at once, each an allocation of its own on a
#      node, every trial's metric reported and the job SUCCEEDED;
#   e. an elastic PyTorchJob (c10d, 1..2 workers): each worker's rendezvous
#      endpoint is a node's address (PET_RDZV_ENDPOINT) and both workers
#      reach it from their own nodes;
#   f. a project's own Unix user (kilnd restarted with a tokens file that
#      maps the project, checking at start that the user reaches the data
#      dir): its replica runs as the user on a node of its own address.
# Every wait is bounded. Skipped (77) with the reason where Slurm or
# network namespaces cannot run here (probes `slurm`, `netns`).
PORT_RANGE=13000-13799 # the cluster's own daemons listen on 13900-13992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod netns # the cluster's fake GPUs are device nodes
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 13900 13992 --netns

# the replicas' Python: Debian's, by its path (a pyenv shim on this PATH
# may not find its interpreter from a Slurm step)
RPY=/usr/bin/python3
[ -x "$RPY" ] || RPY=$(command -v "$PY")
slurm_podman_wrap
start_kilnd "$T/d" --executor slurm --slurm-launch steps --slurm-partition kiln \
    --slurm-gpu-type NVIDIA_TESLA_T4=t4 --container-runtime "$T/podman-wrap"

# the nodes' own addresses, as Slurm knows them (NodeAddr)
A1=$(sinfo -h -N -n n1 -o %o | head -1)
A2=$(sinfo -h -N -n n2 -o %o | head -1)
check "n1 has an address of its own ($A1)" grep -qE '^10\.[0-9]+\.[0-9]+\.11$' <<<"$A1"
check "n2 has an address of its own ($A2)" grep -qE '^10\.[0-9]+\.[0-9]+\.12$' <<<"$A2"
check "n1's name does not resolve here (kilnd must use its NodeAddr)" \
    sh -c '! getent hosts n1 >/dev/null'
addr_of() { case $1 in n1) echo "$A1" ;; n2) echo "$A2" ;; esac; }

# peer.py serve PORT: listens on every address, says who connected, ends;
# peer.py reach HOST PORT: connects (retrying, 30 s at most), says from where
cat >"$T/peer.py" <<'EOF'
import socket, sys, time
if sys.argv[1] == "serve":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2])))
    s.listen(1)
    s.settimeout(60)
    print("LISTENING", sys.argv[2], flush=True)
    c, peer = s.accept()
    print("ACCEPTED", peer[0], flush=True)
else:
    end = time.time() + 30
    while True:
        try:
            c = socket.create_connection((sys.argv[2], int(sys.argv[3])), 3)
            break
        except OSError as e:
            if time.time() > end:
                print("UNREACHABLE", sys.argv[2], sys.argv[3], e, flush=True)
                sys.exit(1)
            time.sleep(0.2)
    print("REACHED %s:%s from %s" % (sys.argv[2], sys.argv[3], c.getsockname()[0]), flush=True)
EOF
q() { printf '%s' "$1" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }
# two JOB MASTER_CMD WORKER_CMD [extra trainingInput members]: a master and one worker
two() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"containerCommand":["sh","-c",%s]}%s}}' \
        "$1" "$(q "$2")" "$(q "$3")" "${4:-}"
}
# said LOG TASK KEY: what TASK's first line "KEY ..." in the job's log.tsv
# (columns: level, time, task, text) says after KEY
said() { awk -F '\t' -v t="$2" -v k="$3 " '$3 == t && index($4, k) == 1 { print substr($4, length(k) + 1); exit }' "$1"; }
# who: what each replica says of itself (host name, Slurm's node name,
# addresses, its cluster spec and PyTorch's master)
who='echo "HOST $(hostname) node=$SLURMD_NODENAME"; echo "ADDR $(hostname -I)"; echo "TFC $TF_CONFIG"; echo "MA ${MASTER_ADDR:-} ${MASTER_PORT:-}"'
# the master's port from TF_CONFIG; the worker's target likewise
tfport="$RPY -c 'import json,os; print(json.loads(os.environ[\"TF_CONFIG\"])[\"cluster\"][\"master\"][0].rsplit(\":\",1)[1])'"
tfmaster="$RPY -c 'import json,os; print(*json.loads(os.environ[\"TF_CONFIG\"])[\"cluster\"][\"master\"][0].rsplit(\":\",1))'"

# ---- a. TF_CONFIG across two hosts ----
api POST /v1/projects/p1/jobs "$(two tf1 "$who; exec $RPY $T/peer.py serve \$($tfport)" "$who; exec $RPY $T/peer.py reach \$($tfmaster)")"
check_eq "tf1 created" "$STATUS" 200
check "tf1 SUCCEEDED" wait_state tf1 SUCCEEDED 120
L=$T/d/jobs/p1/tf1/log.tsv
[ "$(job_state tf1)" = SUCCEEDED ] || tail -n 30 "$L" >&2
mh=$(said "$L" master-replica-0 HOST)
wh=$(said "$L" worker-replica-0 HOST)
mn=${mh%% *} wn=${wh%% *}
check "the master runs on its node's host name ($mh)" test -n "$mn" -a "$mh" = "$mn node=$mn"
check "the worker runs on its node's host name ($wh)" test -n "$wn" -a "$wh" = "$wn node=$wn"
check "master and worker on different nodes ($mn, $wn)" test "$mn" != "$wn"
ma=$(addr_of "$mn") wa=$(addr_of "$wn")
check "the master has its node's address ($ma)" grep -qE "^$ma ?$" <<<"$(said "$L" master-replica-0 ADDR)"
check "the worker has its node's address ($wa)" grep -qE "^$wa ?$" <<<"$(said "$L" worker-replica-0 ADDR)"
tfc=$(said "$L" master-replica-0 TFC)
cl=$(printf '%s' "$tfc" | "$PY" -c 'import json,sys; c = json.load(sys.stdin)["cluster"]; print(c["master"][0].rsplit(":", 1)[0], c["worker"][0].rsplit(":", 1)[0])' 2>/dev/null)
check_eq "TF_CONFIG names the two nodes' addresses (master, worker)" "$cl" "$ma $wa"
mport=$(printf '%s' "$tfc" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["master"][0].rsplit(":", 1)[1])' 2>/dev/null)
check_eq "the worker reached the master's address:port from TF_CONFIG" \
    "$(said "$L" worker-replica-0 REACHED)" "$ma:$mport from $wa"
check_eq "the master accepted the worker's connection from the worker's address" \
    "$(said "$L" master-replica-0 ACCEPTED)" "$wa"

# ---- b. a PyTorchJob-style job: MASTER_ADDR:MASTER_PORT ----
api POST /v1/projects/p1/jobs "$(two pt1 "$who; exec $RPY $T/peer.py serve \$MASTER_PORT" \
    "$who; exec $RPY $T/peer.py reach \$MASTER_ADDR \$MASTER_PORT" ',"pytorchJob":{}')"
check_eq "pt1 created" "$STATUS" 200
check "pt1 SUCCEEDED" wait_state pt1 SUCCEEDED 120
L=$T/d/jobs/p1/pt1/log.tsv
[ "$(job_state pt1)" = SUCCEEDED ] || tail -n 30 "$L" >&2
mn=$(said "$L" master-replica-0 HOST) wn=$(said "$L" worker-replica-0 HOST)
mn=${mn%% *} wn=${wn%% *}
ma=$(addr_of "$mn") wa=$(addr_of "$wn")
check "pt1's replicas on the two nodes ($mn, $wn)" test -n "$ma" -a -n "$wa" -a "$mn" != "$wn"
mp=$(said "$L" worker-replica-0 MA)
check "the worker's MASTER_ADDR is the master node's address ($mp)" grep -qE "^$ma [0-9]+$" <<<"$mp"
check_eq "the worker reached MASTER_ADDR:MASTER_PORT" "$(said "$L" worker-replica-0 REACHED)" "${mp/ /:} from $wa"

# ---- c. containers on two hosts: each peer's real address in /etc/hosts ----
if kiln_probe podman; then
    IMG=kiln-it-shosts-$$:1
    if make_image "$IMG"; then
        hosts='echo "CHOST $(hostname)"; grep -v "^#" /etc/hosts | tr "\t" " " | sed "s/^/HOSTS /"'
        api POST /v1/projects/p1/jobs "$(two ctr1 "$hosts" "$hosts" | sed "s|\"masterConfig\":{|\"masterConfig\":{\"imageUri\":\"localhost/$IMG\",|")"
        check_eq "ctr1 created" "$STATUS" 200
        check "ctr1 SUCCEEDED" wait_state ctr1 SUCCEEDED 120
        L=$T/d/jobs/p1/ctr1/log.tsv
        [ "$(job_state ctr1)" = SUCCEEDED ] || tail -n 30 "$L" >&2
        api GET /v1/projects/p1/jobs/ctr1
        nodes=$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
r = json.load(sys.stdin)["kilnStatus"]["replicas"]
print(" ".join(x.get("node", "") for x in r))')
        mn=${nodes%% *} wn=${nodes##* }
        ma=$(addr_of "$mn") wa=$(addr_of "$wn")
        check "ctr1's containers on the two nodes ($nodes)" test -n "$ma" -a -n "$wa" -a "$mn" != "$wn"
        check "the master's /etc/hosts: the worker's name at the worker node's address ($wa)" \
            grep -qP "\tmaster-replica-0\tHOSTS \Q$wa\E +kiln-p1-ctr1-worker-replica-0" "$L"
        check "the worker's /etc/hosts: the master's name at the master node's address ($ma)" \
            grep -qP "\tworker-replica-0\tHOSTS \Q$ma\E +kiln-p1-ctr1-master-replica-0" "$L"
        check "podman's --add-host carries no node name" \
            sh -c "! grep -Eq -- '--add-host [^ ]*:(n[0-9]|localhost)( |$)' '$T/podman-args.log'"
    else
        fail "cannot build the test image"
    fi
else
    echo "SKIPPED the container part: probe podman: $KILN_PROBE_WHY" >&2
fi

# ---- d. tuning: each trial an allocation of its own on a node ----
tcmd='lr=${0#--lr=}; echo "{\"loss\": $lr, \"global_step\": \"3\"}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "TRIAL $CLOUD_ML_TRIAL_ID on $(hostname) $(hostname -I)"'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":4,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1,"scaleType":"UNIT_LOG_SCALE"}]}'
api POST /v1/projects/p1/jobs "$(job_json tune1 "$tcmd" "$hp")"
check_eq "tune1 created" "$STATUS" 200
check "tune1 SUCCEEDED" wait_state tune1 SUCCEEDED 180
api GET /v1/projects/p1/jobs/tune1
check_eq "4 trials, each with its metric" "$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
t = json.load(sys.stdin)["trainingOutput"]["trials"]
print(sum(1 for x in t if "finalMetric" in x))')" 4
"$KILN" jobs stream-logs tune1 >"$T/tune1.logs" 2>&1
bad=$(grep -o 'TRIAL [0-9]* on .*' "$T/tune1.logs" | awk -v a1="$A1" -v a2="$A2" '!(($4 == "n1" && $5 == a1) || ($4 == "n2" && $5 == a2))' | head -1)
check_eq "every trial ran on a node, at that node's address" "$(grep -c 'TRIAL [0-9]* on n[12] ' "$T/tune1.logs")/${bad:-none}" "4/none"

# ---- e. elastic PyTorchJob: the c10d endpoint is a node's address ----
el='echo "EL $KILN_TASK_NAME on $(hostname) $(hostname -I) rdzv=$PET_RDZV_ENDPOINT"; ep=${PET_RDZV_ENDPOINT}; if [ "$KILN_TASK_NAME" = worker-replica-0 ] || [ "$KILN_TASK_NAME" = master-replica-0 ]; then exec '"$RPY $T/peer.py"' serve ${ep##*:}; else exec '"$RPY $T/peer.py"' reach ${ep%:*} ${ep##*:}; fi'
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"el1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"containerCommand":["sh","-c",%s]},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"rdzvBackend":"c10d","minReplicas":"1","maxReplicas":"2","maxRestarts":"3"}}}}' "$(q "$el")" "$(q "$el")")"
check_eq "el1 created" "$STATUS" 200
check "el1 SUCCEEDED" wait_state el1 SUCCEEDED 120
L=$T/d/jobs/p1/el1/log.tsv
[ "$(job_state el1)" = SUCCEEDED ] || tail -n 30 "$L" >&2
ep=$(grep -o 'rdzv=[0-9.]*:[0-9]*' "$L" | sort -u)
check "one rendezvous endpoint, at a node's address ($ep)" grep -qE "^rdzv=($A1|$A2):[0-9]+$" <<<"$ep"
check "the other worker reached it from its own node" grep -qE "REACHED ${ep#rdzv=} from ($A1|$A2)$" "$L"

# ---- f. a project's own user on the separate hosts ----
if probe_runas >/dev/null 2>&1; then
    chmod 711 "$CLUSTER/munge" # the user's srun reaches munged's socket (the key stays root's)
    U=kilnhosts$$
    if useradd -r -M -s /usr/sbin/nologin "$U"; then
        AT_EXIT="$AT_EXIT; userdel $U >/dev/null 2>&1"
        uid=$(id -u "$U") gid=$(id -g "$U")
        chmod 755 "$T"
        TOKEN=tok-editor-0123456789abcdef
        printf '%s * editor\nproject p1 user %s\n' "$TOKEN" "$U" >"$T/tokens"
        chmod 600 "$T/tokens"
        export TOKEN
        stop_kilnd
        NO_ROOT_OK=1 start_kilnd "$T/d" --executor slurm --slurm-launch steps --slurm-partition kiln \
            --slurm-gpu-type NVIDIA_TESLA_T4=t4 --container-runtime "$T/podman-wrap" --tokens "$T/tokens"
        api POST /v1/projects/p1/jobs "$(job_json user1 'echo "IDS $(id -u) $(id -g) on $(hostname) $(hostname -I)"')"
        check_eq "user1 created" "$STATUS" 200
        check "user1 SUCCEEDED" wait_state user1 SUCCEEDED 60
        ids=$(said "$T/d/jobs/p1/user1/log.tsv" master-replica-0 IDS)
        check "the replica ran as the project's user, on a node at its address ($ids)" \
            grep -qE "^$uid $gid on (n1 $A1|n2 $A2) ?$" <<<"$ids"
    else
        fail "useradd $U"
    fi
else
    echo "SKIPPED the project-user part: probe runas: $(probe_runas 2>&1)" >&2
fi

finish

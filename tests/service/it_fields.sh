#!/bin/bash
# tests/service/it_fields.sh - every field kiln accepts is acted on or refused
# at create (issue 16), on a real kilnd:
#   1. fields kiln does not act on: HTTP 400 with a fieldViolation at their
#      path, nothing stored, and `kiln validate` refuses the same;
#   2. a process replica gets <role>Config.env after kiln's own variables;
#      securityContext (2a): noNewPrivileges is the kernel's no_new_privs,
#      runAsUser true or refused at create;
#      http(s):// packageUris are fetched when the job starts (2d): size cap,
#      HTTP status, redirects, the sha256 in the job's events; off the
#      supervisor thread (2e): other jobs run and cancels act meanwhile;
#   3. a TFJob in the shape of the Kubeflow docs' mnist example (a
#      Kubernetes label key, env, resources.limits, a hostPath volume),
#      submitted unchanged: it runs in a container that sees the env, the
#      mount and podman's CPU/memory limits, and is found by its label;
#      a container's securityContext is podman's (no_new_privs, a
#      read-only root filesystem, dropped capabilities).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"

start_kilnd "$T/d"

# 1. refusals at create, each at its field path
refused() { # refused DESCRIPTION FIELD MASTER_CONFIG_MEMBERS TRAINING_INPUT_MEMBERS
    local body='{"jobId":"r1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["true"]'"$3"'}'"$4"'}}'
    api POST /v1/projects/p1/jobs "$body"
    check_eq "$1: 400" "$STATUS" 400
    check_eq "$1: the field" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "$2"
    printf '%s' "$body" >"$T/refused.json"
    "$KILN" validate --config "$T/refused.json" >/dev/null 2>"$T/validate.err"
    check "$1: kiln validate refuses it too" grep -qF "$2: " "$T/validate.err"
}
refused "an ftp package" "trainingInput.packageUris[0]" "" ',"packageUris":["ftp://example.com/t.tar.gz"]'
check "the refusal lists the supported schemes" grep -qF "file:///path on kilnd's machine, gs://BUCKET/NAME" "$T/validate.err"
check "... http(s) among them" grep -qF "or http(s)://HOST/PATH of a .tar.gz, .tgz or .whl" "$T/validate.err"
refused "an https URL naming no package file" "trainingInput.packageUris[0]" "" ',"packageUris":["https://example.com/trainer/"]'
check "the reason names the file types" grep -qF "must end in .tar.gz, .tgz" "$T/validate.err"
refused "an https URL with a password" "trainingInput.packageUris[0]" "" ',"packageUris":["https://u:pw@example.com/t.tar.gz"]'
refused "an http URL with no host" "trainingInput.packageUris[0]" "" ',"packageUris":["http:///t.whl"]'
# runtime versions choose an image (it_runtime_version.sh runs one): one
# the catalog does not map, or a Python it does not offer with the version,
# is refused with what it maps; pythonVersion comes with a runtimeVersion
refused "an unmapped runtimeVersion" "trainingInput.runtimeVersion" "" ',"runtimeVersion":"2.12"'
check "the refusal lists the mapped versions" grep -qF "this site maps 1.15, 2.1, 2.2" "$T/validate.err"
refused "a Python the version lacks" "trainingInput.pythonVersion" "" ',"runtimeVersion":"2.11","pythonVersion":"3.5"'
check "the refusal lists its Pythons" grep -qF "Python 3.7, 3.10" "$T/validate.err"
refused "pythonVersion alone" "trainingInput.pythonVersion" "" ',"pythonVersion":"3.7"'
check "the refusal asks for a runtimeVersion" grep -qF "needs a runtimeVersion" "$T/validate.err"
refused "network" "trainingInput.network" "" ',"network":"n"'
refused "enableWebAccess" "trainingInput.enableWebAccess" "" ',"enableWebAccess":true'
refused "a diskConfig disk class kiln cannot promise" "trainingInput.masterConfig.diskConfig.bootDiskType" ',"diskConfig":{"bootDiskType":"hyperdisk-balanced"}' ""
refused "an env name kiln sets" "trainingInput.masterConfig.env.TF_CONFIG" ',"env":{"TF_CONFIG":"{}"}' ""
refused "a CPU limit on a process" "trainingInput.masterConfig.cpuLimit" ',"cpuLimit":"1"' ""
refused "a pull policy on a process" "trainingInput.masterConfig.imagePullPolicy" ',"imagePullPolicy":"Always"' ""
api GET /v1/projects/p1/jobs/r1
check_eq "nothing refused was stored" "$STATUS" 404

# 1b. a Kubeflow file's harmless keys kiln does not use are accepted and
# said: the CLI converts the file, kilnd never sees it, so the CLI notes them
cat >"$T/notes.yaml" <<'YAML'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: notes-1
  namespace: kubeflow
  annotations:
    kiln.dev/region: us-central1
    team.example.com/owner: alice
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        metadata:
          labels:
            app: notes
          annotations:
            sidecar.istio.io/inject: "false"
        spec:
          containers:
            - name: tensorflow
              image: example.com/t:1
YAML
"$KILN" validate --tfjob "$T/notes.yaml" >/dev/null 2>"$T/notes.err"
check_eq "kiln validate accepts it" "$?" 0
check "it notes the namespace" grep -qF "note: metadata.namespace: 'kubeflow' is not used: kiln has no namespaces" "$T/notes.err"
check "it notes an annotation kiln does not read" grep -qF "note: metadata.annotations: 'team.example.com/owner' is kept in the file only: kiln does not use it" "$T/notes.err"
check "but not kiln's own" bash -c "! grep -qF \"'kiln.dev/region' is kept\" '$T/notes.err'"
check "it notes the pod template's annotations" grep -qF "note: spec.tfReplicaSpecs.Worker.template.metadata.annotations: 'sidecar.istio.io/inject' is kept in the file only" "$T/notes.err"
check "and its labels" grep -qF "note: spec.tfReplicaSpecs.Worker.template.metadata.labels: kept in the file only" "$T/notes.err"

# 2. env on a process replica, after kiln's own
api POST /v1/projects/p1/jobs '{"jobId":"env_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","echo \"GREETING=$GREETING TASK=$KILN_TASK_NAME\""],"env":{"GREETING":"hello world"}}}}'
check_eq "a job with env is accepted" "$STATUS" 200
check "it SUCCEEDED" wait_state env_1 SUCCEEDED 30
check "the replica saw its env and kiln's" grep -q "GREETING=hello world TASK=master-replica-0" "$T/d/jobs/p1/env_1/log.tsv"

# 2a. securityContext (issue 41): noNewPrivileges (a Kubeflow container's
# allowPrivilegeEscalation: false) on a process replica is the kernel's
# no_new_privs, which a replica without it does not have; runAsUser is
# accepted when it is the user the replicas run as, and any other is
# refused at create, naming the field and that user
ME=$(id -u)
sc_job() { # sc_job ID COMMAND SECURITY_CONTEXT
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","%s"],"securityContext":%s}}}' "$1" "$2" "$3"
}
api POST /v1/projects/p1/jobs "$(sc_job nnp_1 'grep NoNewPrivs /proc/self/status; id -u' '{"noNewPrivileges":true,"runAsUser":"'"$ME"'"}')"
check_eq "noNewPrivileges and the replicas' own runAsUser: accepted" "$STATUS" 200
check "it SUCCEEDED" wait_state nnp_1 SUCCEEDED 30
check "the replica runs with no_new_privs" grep -qP "NoNewPrivs:\t1$" "$T/d/jobs/p1/nnp_1/log.tsv"
check "as the user runAsUser says" grep -qP "\t$ME$" "$T/d/jobs/p1/nnp_1/log.tsv"
api POST /v1/projects/p1/jobs '{"jobId":"nnp_0","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["grep","NoNewPrivs","/proc/self/status"]}}}'
check "a replica without it SUCCEEDED" wait_state nnp_0 SUCCEEDED 30
check "and has no no_new_privs" grep -qP "NoNewPrivs:\t0$" "$T/d/jobs/p1/nnp_0/log.tsv"
api POST /v1/projects/p1/jobs "$(sc_job ruser_1 true '{"runAsUser":"'$((ME + 1))'"}')"
check_eq "runAsUser of another user: 400" "$STATUS" 400
check_eq "at its field" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" trainingInput.masterConfig.securityContext.runAsUser
check "naming the user kiln runs the replicas as" grep -qF "kiln runs this project's replicas as user $(id -un) (uid $ME" <<<"$BODY"
api GET /v1/projects/p1/jobs/ruser_1
check_eq "nothing stored" "$STATUS" 404
# runAsNonRoot: true only of replicas that do not run as root (here as
# kilnd's own user: root under --allow-root-replicas yes)
api POST /v1/projects/p1/jobs "$(sc_job nonroot_1 true '{"runAsNonRoot":true}')"
if [ "$ME" = 0 ]; then
    check_eq "runAsNonRoot of root's replicas: 400" "$STATUS" 400
    check_eq "at its field" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" trainingInput.masterConfig.securityContext.runAsNonRoot
    check "saying they run as root" grep -qF "which is root" <<<"$BODY"
else
    check_eq "runAsNonRoot of a user's replicas: accepted" "$STATUS" 200
    check "it SUCCEEDED" wait_state nonroot_1 SUCCEEDED 30
fi
sc_job ruser_2 true '{"runAsUser":"'$((ME + 1))'"}' >"$T/ruser.json"
"$KILN" validate --config "$T/ruser.json" >/dev/null 2>"$T/ruser.err"
check_eq "kiln validate, which does not know the project's user, accepts it" "$?" 0
check "and says it is checked at submit" grep -qF "note: trainingInput.masterConfig.securityContext.runAsUser: checked when the job is submitted" "$T/ruser.err"
refused "readOnlyRootFilesystem on a process" "trainingInput.masterConfig.securityContext.readOnlyRootFilesystem" ',"securityContext":{"readOnlyRootFilesystem":true}' ""

# 2b. runPolicy.ttlSecondsAfterFinished: the job's files go once the TTL has
# passed (its record, log.tsv and metrics stay), also across a kilnd restart
cleaned() { # cleaned JOB: nothing left but log.tsv and metrics.jsonl, and the event
    local d=$T/d/jobs/p1/$1
    [ -z "$(ls "$d" | grep -vxE 'log.tsv|metrics.jsonl')" ] &&
        grep -q "cleaned after ttlSecondsAfterFinished=" "$d/log.tsv"
}
wait_cleaned() { # wait_cleaned JOB SECONDS
    for _ in $(seq 1 $(($2 * 10))); do cleaned "$1" && return 0; sleep 0.1; done
    ls -R "$T/d/jobs/p1/$1" >&2
    return 1
}
check "a job without a TTL keeps its replicas' files" test -d "$T/d/jobs/p1/env_1/replicas"
# the marker is written before the job is stored; a create the store refuses
# (409: the id exists) leaves none behind
api POST /v1/projects/p1/jobs '{"jobId":"env_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["true"]},"runPolicy":{"ttlSecondsAfterFinished":"2"}}}'
check_eq "a TTL job with a taken id: 409" "$STATUS" 409
check "no TTL marker left for the refused create" test ! -e "$T/d/ttl/p1/env_1"
api POST /v1/projects/p1/jobs '{"jobId":"ttl_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","echo ttl-job-ran"]},"runPolicy":{"ttlSecondsAfterFinished":"2"}}}'
check_eq "a job with a TTL is accepted" "$STATUS" 200
check "it SUCCEEDED" wait_state ttl_1 SUCCEEDED 30
check "right after the end its replicas' files are there" test -d "$T/d/jobs/p1/ttl_1/replicas"
check "not cleaned before the TTL" bash -c "! grep -q cleaned '$T/d/jobs/p1/ttl_1/log.tsv'"
check "cleaned once the TTL has passed" wait_cleaned ttl_1 10
check "its log (the replica's output) stays" grep -q "ttl-job-ran" "$T/d/jobs/p1/ttl_1/log.tsv"
api GET /v1/projects/p1/jobs/ttl_1
check_eq "the job record stays" "$(printf '%s' "$BODY" | jget state)" SUCCEEDED
api POST /v1/projects/p1/jobs '{"jobId":"ttl_2","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["true"]},"runPolicy":{"ttlSecondsAfterFinished":"6"}}}'
check "a second TTL job SUCCEEDED" wait_state ttl_2 SUCCEEDED 30
stop_kilnd
start_kilnd "$T/d"
check "not cleaned before its TTL after a restart" test -d "$T/d/jobs/p1/ttl_2/replicas"
check "cleaned by the next kilnd, from endTime + TTL" wait_cleaned ttl_2 15
check "the marker is gone once cleaned" test ! -e "$T/d/ttl/p1/ttl_2"

# 2c. TPUs: refused at create at the TPU field unless a node declares the
# TPU type (no node discovers TPUs)
TPU1='{"jobId":"tpu_1","trainingInput":{"scaleTier":"BASIC_TPU","region":"us-central1","masterConfig":{"containerCommand":["true"]}}}'
TPU2='{"jobId":"tpu_2","trainingInput":{"scaleTier":"CUSTOM","masterType":"n1-standard-4","workerType":"cloud_tpu","workerCount":"1","workerConfig":{"acceleratorConfig":{"type":"TPU_V3","count":"8"},"tpuTfVersion":"2.11"},"region":"us-central1","masterConfig":{"containerCommand":["true"]}}}'
api POST /v1/projects/p1/jobs "$TPU1"
check_eq "BASIC_TPU with no TPU node: 400" "$STATUS" 400
check_eq "at the scale tier" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" trainingInput.scaleTier
check "the reason says no node declares it" grep -q "no node of this kilnd declares" <<<"$BODY"
api POST /v1/projects/p1/jobs "$TPU2"
check_eq "a cloud_tpu worker with TPU_V3: 400" "$STATUS" 400
check "at acceleratorConfig.type, tpuTfVersion and workerType" "$PY" -c '
import json, sys
f = [v["field"] for v in json.loads(sys.argv[1])["error"]["details"][0]["fieldViolations"]]
sys.exit(f != ["trainingInput.workerConfig.acceleratorConfig.type", "trainingInput.workerConfig.tpuTfVersion", "trainingInput.workerType"])' "$BODY"
api GET /v1/projects/p1/jobs/tpu_2
check_eq "nothing stored" "$STATUS" 404
stop_kilnd
printf '{"nodes": [{"name": "tpuhost", "address": "127.0.0.1", "cpus": 16, "memoryGb": 64, "accelerators": [{"type": "TPU_V3", "count": 8}]}]}\n' >"$T/tpu-nodes.json"
start_kilnd "$T/d-tpu" --node-config "$T/tpu-nodes.json"
api POST /v1/projects/p1/jobs "$TPU2"
check_eq "a site whose node config declares TPU_V3 accepts it" "$STATUS" 200
api POST /v1/projects/p1/jobs "$TPU1"
check_eq "but not BASIC_TPU's TPU_V2, which no node declares" "$STATUS" 400
api POST /v1/projects/p1/jobs/tpu_2:cancel
stop_kilnd
# from here on a 64 KiB cap on fetched packages (2d)
start_kilnd "$T/d" --max-package-bytes 65536

# 2d. http(s):// packageUris: fetched into the job's staging dir when it
# starts, the size and sha256 in its events; a failed fetch FAILS the job
# naming the URI and the reason. The server: Python's http.server handler on
# a port the kernel picks (written to a file: no race for a free port), plus
# a few paths that redirect or send no Content-Length.
WWW=$T/www
mkdir -p "$WWW" "$T/sd/trainer_h-0.1/trainer_h"
: >"$T/sd/trainer_h-0.1/trainer_h/__init__.py"
printf 'import sys\nprint("HTTP TRAINER RAN", sys.argv[1:])\n' >"$T/sd/trainer_h-0.1/trainer_h/task.py"
tar -czf "$WWW/trainer_h-0.1.tar.gz" -C "$T/sd" trainer_h-0.1
head -c 200000 /dev/urandom >"$T/sd/trainer_h-0.1/blob"
tar -czf "$WWW/big-0.1.tar.gz" -C "$T/sd" trainer_h-0.1
cp "$WWW/big-0.1.tar.gz" "$WWW/nolen-src.bin"
"$PY" - "$WWW" "$T/www.port" <<'PYEOF' >"$T/www.log" 2>&1 &
import functools, http.server, os, sys, time
class H(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/to-ftp.tar.gz":
            self.send_response(302); self.send_header("Location", "ftp://127.0.0.1/t.tar.gz")
            self.end_headers(); return
        if self.path.startswith("/loop"):
            n = int(self.path[5:].split(".")[0] or 0) + 1
            self.send_response(302); self.send_header("Location", "/loop%d.tar.gz" % n)
            self.end_headers(); return
        if self.path == "/nolen.tar.gz":  # no Content-Length: the cap holds as bytes arrive
            self.send_response(200); self.send_header("Connection", "close"); self.end_headers()
            with open(os.path.join(sys.argv[1], "nolen-src.bin"), "rb") as f:
                self.wfile.write(f.read())
            return
        if self.path == "/slow.tar.gz":  # 1.5 KB/s, above libcurl's low-speed floor: 40 s
            self.send_response(200); self.send_header("Content-Length", "60000"); self.end_headers()
            try:
                for _ in range(40):
                    self.wfile.write(b"x" * 1500); self.wfile.flush(); time.sleep(1)
            except OSError:
                pass  # the client went away (the job was cancelled)
            return
        return super().do_GET()
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(H, directory=sys.argv[1]))
open(sys.argv[2] + ".tmp", "w").write(str(s.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
s.serve_forever()
PYEOF
WWW_PID=$!
AT_EXIT="kill $WWW_PID 2>/dev/null${AT_EXIT:+; $AT_EXIT}"
for _ in $(seq 1 100); do [ -s "$T/www.port" ] && break; sleep 0.05; done
WURL=http://127.0.0.1:$(cat "$T/www.port")
http_job() { # http_job JOB URI
    api POST /v1/projects/p1/jobs '{"jobId":"'"$1"'","trainingInput":{"scaleTier":"BASIC","region":"us-central1","pythonModule":"trainer_h.task","packageUris":["'"$2"'"],"args":["--epochs","1"]}}'
    check_eq "$1: accepted at create" "$STATUS" 200
}
job_error() { api GET "/v1/projects/p1/jobs/$1"; printf '%s' "$BODY" | jget errorMessage; }
http_job http_1 "$WURL/trainer_h-0.1.tar.gz"
check "an http sdist job SUCCEEDED" wait_state http_1 SUCCEEDED 30
check "it ran the fetched package" grep -q "HTTP TRAINER RAN \['--epochs', '1'\]" "$T/d/jobs/p1/http_1/log.tsv"
SUM=$(sha256sum "$WWW/trainer_h-0.1.tar.gz" | cut -d' ' -f1)
SIZE=$(stat -c %s "$WWW/trainer_h-0.1.tar.gz")
check "its events carry the size and sha256" grep -qF "fetched $WURL/trainer_h-0.1.tar.gz: $SIZE bytes, sha256 $SUM" "$T/d/jobs/p1/http_1/log.tsv"
check "no partial file is left" bash -c "! ls '$T/d/jobs/p1/http_1/staging' | grep -q '\.part$'"
http_job http_big "$WURL/big-0.1.tar.gz"
check "a package over --max-package-bytes FAILED" wait_state http_big FAILED 30
check "naming the URI and the cap" grep -qF "packageUris[0] '$WURL/big-0.1.tar.gz': cannot fetch it: larger than kilnd's --max-package-bytes (65536 bytes)" <<<"$(job_error http_big)"
http_job http_nolen "$WURL/nolen.tar.gz"
check "... also when the server sends no Content-Length" wait_state http_nolen FAILED 30
check "naming the cap" grep -qF "larger than kilnd's --max-package-bytes (65536 bytes)" <<<"$(job_error http_nolen)"
check "the partial download is removed" bash -c "[ -z \"\$(ls '$T/d/jobs/p1/http_nolen/staging')\" ]"
http_job http_404 "$WURL/absent-0.1.tar.gz"
check "a 404 FAILED" wait_state http_404 FAILED 30
check "naming the URI and the status" grep -qF "'$WURL/absent-0.1.tar.gz': cannot fetch it: HTTP status 404" <<<"$(job_error http_404)"
http_job http_ftp "$WURL/to-ftp.tar.gz"
check "a redirect to ftp:// FAILED" wait_state http_ftp FAILED 30
check "naming the scheme" grep -qF "redirected to a scheme other than http or https" <<<"$(job_error http_ftp)"
http_job http_loop "$WURL/loop.tar.gz"
check "endless redirects FAILED" wait_state http_loop FAILED 30
check "after 5" grep -qF "more than 5 redirects" <<<"$(job_error http_loop)"

# 2e. a fetch runs off the supervisor thread: while a slow server trickles
# one job's package (40 s), another job is placed, runs and ends, and a
# cancel of the fetching job is acted on at once (its fetch stops, no
# partial file stays). A fetch on the supervisor thread fails all three.
http_job http_slow "$WURL/slow.tar.gz"
fetching() {
    for _ in $(seq 1 100); do
        grep -qF "fetching $WURL/slow.tar.gz" "$T/d/jobs/p1/http_slow/log.tsv" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
check "the slow fetch has begun" fetching
api POST /v1/projects/p1/jobs '{"jobId":"during_fetch","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["true"]}}}'
check_eq "a job submitted meanwhile is accepted" "$STATUS" 200
check "it SUCCEEDED while the fetch went on" wait_state during_fetch SUCCEEDED 20
check_eq "the fetching job is still PREPARING" "$(job_state http_slow)" PREPARING
api POST /v1/projects/p1/jobs/http_slow:cancel
check "the fetching job is CANCELLED within seconds" wait_state http_slow CANCELLED 10
check "its partial download is removed" bash -c "! ls '$T/d/jobs/p1/http_slow/staging' | grep -q '\.part$'"

# 3. the mnist-shaped TFJob, unchanged
if ! kiln_probe podman; then
    echo "part 3 not run: $KILN_PROBE_WHY; to run it: $KILN_PROBE_FIX"
    finish
fi
IMG=kiln-it-fields-$$:1
make_image "$IMG" || {
    fail "cannot build the test image"
    finish
}
DATA=$T/train-data
mkdir -p "$DATA" && echo "digits" >"$DATA/README"
cat >"$T/mnist.yaml" <<YAML
# kiln's own test file, in the shape of the Kubeflow docs' TFJob mnist example
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: tfjob-mnist
  namespace: kubeflow
  labels:
    app.kubernetes.io/name: mnist
    app.kubernetes.io/part-of: kiln-tests
spec:
  runPolicy:
    cleanPodPolicy: Running
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        metadata:
          annotations:
            sidecar.istio.io/inject: "false"
        spec:
          containers:
            - name: tensorflow
              image: localhost/$IMG
              imagePullPolicy: Always
              command:
                - sh
                - -c
                - 'echo "EPOCHS=\$EPOCHS"; cat /train/README;
                   for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us; do [ -r \$f ] && echo "CPU \$(cat \$f)"; done;
                   for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do [ -r \$f ] && echo "MEM \$(cat \$f)"; done; true'
              env:
                - name: EPOCHS
                  value: "3"
              ports:
                - containerPort: 2222
                  name: tfjob-port
              resources:
                limits:
                  cpu: 500m
                  memory: 256Mi
              volumeMounts:
                - name: training
                  mountPath: /train
                  readOnly: true
          volumes:
            - name: training
              hostPath:
                path: $DATA
YAML
"$KILN" validate --tfjob "$T/mnist.yaml" >"$T/mnist.validate" 2>&1
check_eq "kiln validate accepts the mnist TFJob" "$?" 0
"$KILN" jobs submit training --tfjob "$T/mnist.yaml" >"$T/submit.out" 2>&1
check_eq "the mnist TFJob is submitted unchanged" "$?" 0
for f in mnist.validate submit.out; do
    check "$f: notes metadata.namespace" grep -qF "note: metadata.namespace: 'kubeflow' is not used: kiln has no namespaces" "$T/$f"
    check "$f: notes the istio annotation" grep -qF "'sidecar.istio.io/inject' is kept in the file only" "$T/$f"
done
cat "$T/submit.out" >&2
check "it SUCCEEDED" wait_state tfjob_mnist SUCCEEDED 60
LOG=$T/d/jobs/p1/tfjob_mnist/log.tsv
check "env reached the container" grep -q "EPOCHS=3" "$LOG"
# no registry here: Always tried a pull, and ran the node's copy with a warning
check "imagePullPolicy Always pulled, then ran the local copy" \
    grep -q "WARNING.*imagePullPolicy Always: cannot pull localhost/$IMG.*running the copy in local storage" "$LOG"
check "the hostPath volume is mounted" grep -q "digits" "$LOG"
check "the CPU limit is podman's --cpus (cgroup v2 cpu.max or v1 quota)" grep -qE "CPU 50000( 100000)?$" "$LOG"
check "the memory limit is podman's --memory" grep -q "MEM 268435456$" "$LOG"
api GET /v1/projects/p1/jobs/tfjob_mnist
check_eq "the Kubernetes label is kept verbatim" \
    "$(printf '%s' "$BODY" | jget labels | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("app.kubernetes.io/name",""))')" mnist
api GET "/v1/projects/p1/jobs?filter=labels.app.kubernetes.io/name%3Dmnist"
check_eq "the label filters the list" "$(printf '%s' "$BODY" | jget jobs.0.jobId)" tfjob_mnist
check_eq "only that job" "$(printf '%s' "$BODY" | jget jobs.1.jobId)" ""
# securityContext on a container (issue 41), from a Kubeflow file: the
# pod's seccompProfile and the container's allowPrivilegeEscalation: false,
# readOnlyRootFilesystem and capabilities.drop are podman's, in the container
cat >"$T/secctx.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: tfjob-secctx
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          securityContext:
            seccompProfile: {type: RuntimeDefault}
          containers:
            - name: tensorflow
              image: localhost/$IMG
              imagePullPolicy: Never
              command:
                - sh
                - -c
                - 'grep -E "NoNewPrivs|CapEff" /proc/self/status;
                   touch /root-file 2>/dev/null && echo ROOT-WRITABLE || echo ROOT-READONLY;
                   touch /tmp/f 2>/dev/null && echo TMP-WRITABLE || echo TMP-READONLY'
              securityContext:
                allowPrivilegeEscalation: false
                privileged: false
                readOnlyRootFilesystem: true
                capabilities: {drop: [ALL]}
YAML
"$KILN" jobs submit training --tfjob "$T/secctx.yaml" >"$T/secctx.out" 2>&1
check_eq "a TFJob with a securityContext is submitted" "$?" 0
check "it SUCCEEDED" wait_state tfjob_secctx SUCCEEDED 60
LOG=$T/d/jobs/p1/tfjob_secctx/log.tsv
check "the container runs with no_new_privs" grep -qP "NoNewPrivs:\t1$" "$LOG"
check "with every capability dropped" grep -qP "CapEff:\t0+$" "$LOG"
check "its root filesystem read-only" grep -q "ROOT-READONLY$" "$LOG"
check "/tmp too: only volumes are writable, as on Kubernetes" grep -q "TMP-READONLY$" "$LOG"
# imagePullPolicy Never: an image the node lacks is never pulled; the
# replica fails naming it
# resources.limits are the scheduler's request too: a container held to more
# CPUs (or memory) than any node has can never run, and FAILS saying so
api POST /v1/projects/p1/jobs '{"jobId":"too_big_cpu","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"imageUri":"localhost/'"$IMG"'","containerCommand":["true"],"cpuLimit":"4096"}}}'
check_eq "a 4096-CPU limit is accepted" "$STATUS" 200
check "it FAILED (never fits)" wait_state too_big_cpu FAILED 30
api GET /v1/projects/p1/jobs/too_big_cpu
check "the error names the limits and the shortfall" "$PY" -c 'import json,sys; m=json.loads(sys.argv[1])["errorMessage"]; sys.exit(not ("can never run" in m and "resources.limits" in m and "4096 vCPUs" in m and "the largest" in m))' "$BODY"
api POST /v1/projects/p1/jobs '{"jobId":"too_big_mem","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"imageUri":"localhost/'"$IMG"'","containerCommand":["true"],"memoryLimit":"100Ti"}}}'
check "a 100Ti memory limit FAILED (never fits)" wait_state too_big_mem FAILED 30
api GET /v1/projects/p1/jobs/too_big_mem
check "its error names the memory asked for" "$PY" -c 'import json,sys; m=json.loads(sys.argv[1])["errorMessage"]; sys.exit(not ("resources.limits" in m and "102400.0 GiB" in m))' "$BODY"
api POST /v1/projects/p1/jobs '{"jobId":"never_pull","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"imageUri":"localhost/kiln-it-absent-'$$':1","imagePullPolicy":"Never"}}}'
check_eq "a Never job is accepted" "$STATUS" 200
check "it FAILED" wait_state never_pull FAILED 30
api GET /v1/projects/p1/jobs/never_pull
check "the error names the image and the policy" "$PY" -c 'import json,sys; m=json.loads(sys.argv[1])["errorMessage"]; sys.exit(not ("kiln-it-absent" in m and "imagePullPolicy is Never" in m))' "$BODY"
check "nothing was pulled" bash -c "! grep -q 'pulling it' '$T/d/jobs/p1/never_pull/log.tsv'"
finish

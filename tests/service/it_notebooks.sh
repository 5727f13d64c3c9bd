#!/bin/bash
# tests/service/it_notebooks.sh - notebook instances (docs/notebooks.md) with
# the real gcloud (`gcloud notebooks instances` through
# api_endpoint_overrides/notebooks) and real JupyterLab on simulated GPUs:
# create with 2 GPUs (gcloud waits for ACTIVE), describe, list, the GPUs held
# and given back on stop, update to 1 GPU while stopped, start, reset,
# delete; through kilnd's proxy with Jupyter's REST and WebSocket protocols
# (tests/service/notebooks/nbclient.py): a cell sees its GPUs and no
# TF_CONFIG, a file outlives stop/start and reset, a terminal echoes; no
# token, a viewer's and another project's token get nothing; what kiln does
# not act on is refused naming the field; idle shutdown; kill -9 of kilnd
# leaves the notebook running and reachable through the next kilnd.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need gcloud jupyterlab
NBPY=${KILN_NOTEBOOK_PYTHON:-${KILN_NOTEBOOK_VENV:-$HOME/.cache/kiln/notebook-venv}/bin/python}
NBC="$(dirname "$0")/notebooks/nbclient.py"

cat >"$T/nodes.json" <<'EOF'
{"nodes": [{"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_T4", "count": 2}]}]}
EOF
E1=editor-p1-0123456789abcdef
V1=viewer-p1-0123456789abcdef
E2=editor-p2-0123456789abcdef
printf '%s p1 editor\n%s p1 viewer\n%s p2 editor\n' "$E1" "$V1" "$E2" >"$T/tokens"
chmod 600 "$T/tokens"
start_kilnd "$T/d" --node-config "$T/nodes.json" --tokens "$T/tokens" --notebook-python "$NBPY" \
    --bucket nb-stage:p1
TOKEN=$E1

printf '%s' "$E1" >"$T/tok1"
mkdir -p "$T/gc"
gc_set() {
    local kv
    for kv in "core/project p1" "core/disable_usage_reporting true" \
        "component_manager/disable_update_check true" "api_endpoint_overrides/notebooks $URL/" \
        "auth/access_token_file $T/tok1"; do
        # shellcheck disable=SC2086
        CLOUDSDK_CONFIG=$T/gc gcloud config set $kv >/dev/null 2>&1 || fail "config set $kv"
    done
}
gc_set
gc() { CLOUDSDK_CONFIG=$T/gc timeout 120 gcloud notebooks instances "$@" --location us-west1-b; }
desc() { gc describe "$1" --format json 2>/dev/null; }
allocatable() {
    api GET /v1/nodes
    printf '%s' "$BODY" | jget nodes.0.allocatable.NVIDIA_TESLA_T4
}
nb() { "$NBPY" "$NBC" "$URL/notebooks/p1/$1/" "${2-$E1}" "${@:3}"; }
# wait_nb NAME STATE SECONDS
wait_nb() {
    local i s=""
    for i in $(seq 1 "$(($3 * 2))"); do
        TOKEN=$E1 api GET "/v1/projects/p1/locations/us-west1-b/instances/$1"
        s=$(printf '%s' "$BODY" | jget state)
        [ "$s" = "$2" ] && return 0
        sleep 0.5
    done
    echo "  instance $1 is '$s', waited for '$2'" >&2
    return 1
}

# ---- create with 2 GPUs: gcloud waits on the operation until ACTIVE ----
check "gcloud create (2 x T4)" gc create nb1 --vm-image-project deeplearning-platform-release \
    --vm-image-family common-cpu --machine-type n1-standard-8 \
    --accelerator-type NVIDIA_TESLA_T4 --accelerator-core-count 2 --labels team=ml
out=$(desc nb1)
check_eq "describe: ACTIVE" "$(printf '%s' "$out" | jget state)" ACTIVE
check_eq "describe: 2 GPUs held" "$(printf '%s' "$out" | jget kiln.gpus)" "[0, 1]"
check_eq "describe: proxyUri" "$(printf '%s' "$out" | jget proxyUri)" "$URL/notebooks/p1/nb1/"
check_eq "describe: label" "$(printf '%s' "$out" | jget labels.team)" ml
check_eq "list" "$(gc list --format 'value(name.basename(),state)' 2>&1)" "nb1	ACTIVE"
check_eq "its GPUs are taken" "$(allocatable)" 0
job1=$(printf '%s' "$out" | jget kiln.job)
check_eq "its run is a job of the project" "$(job_state "$job1")" RUNNING

# ---- through the proxy: a cell, a file, a terminal ----
check_eq "cell sees its 2 GPUs, no TF_CONFIG" \
    "$(nb nb1 "$E1" run 'import os; print(os.environ["CUDA_VISIBLE_DEVICES"], os.environ.get("TF_CONFIG"))' 2>&1)" \
    "0,1 None"
check "write a file" nb nb1 "$E1" put kept.txt "written before stop"
check_eq "a terminal echoes" "$(nb nb1 "$E1" terminal hello 2>&1)" hello-42
check_eq "the cookie opens it too" \
    "$(curl -s -o /dev/null -w '%{http_code}' --cookie "kiln_token=$E1" "$URL/notebooks/p1/nb1/lab")" 200
check_eq "kilnd under a public name (Host header)" "$(curl -s -o /dev/null -w '%{http_code}' \
    -H 'Host: kiln.example.com' -H "Authorization: Bearer $E1" "$URL/notebooks/p1/nb1/api/status")" 200
check "JupyterLab's page through the proxy" grep -q 'JupyterLab' \
    <<<"$(curl -s -H "Authorization: Bearer $E1" "$URL/notebooks/p1/nb1/lab")"

# ---- the CLI: list, describe, exec as the notebook runs ----
check "kiln notebooks list" grep -q 'nb1 .*ACTIVE .*2 x NVIDIA_TESLA_T4 (held)' <<<"$(KILN_TOKEN=$E1 "$KILN" notebooks list)"
check_eq "kiln notebooks describe" "$(KILN_TOKEN=$E1 "$KILN" notebooks describe nb1 --format json | jget state)" ACTIVE
out=$(KILN_TOKEN=$E1 "$KILN" notebooks exec nb1 -- sh -c 'echo "$CUDA_VISIBLE_DEVICES $(pwd) ${TF_CONFIG:-none}"; python -c "import jupyterlab"; cat kept.txt; exit 3' 2>&1)
rc=$?
check_eq "exec: its GPUs, its home, its python, its files" "$out" "0,1 $T/d/notebooks/p1/nb1 none
written before stop"
check_eq "exec: the command's exit status" "$rc" 3
KILN_TOKEN=$E2 "$KILN" notebooks exec nb1 -- true >/dev/null 2>&1
check_eq "exec with another project's token: not found" "$?" 3
# the dashboard's sign-in: the token as an HttpOnly cookie for /notebooks/
hdr=$(curl -s -D - -o /dev/null -X POST -H "Authorization: Bearer $E1" "$URL/v1/notebooks:signin")
check "signin sets the HttpOnly cookie" grep -qi "set-cookie: kiln_token=$E1; Path=/notebooks/; HttpOnly; SameSite=Strict" <<<"$hdr"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/v1/notebooks:signin")
check_eq "signin without a token -> 401" "$code" 401

# ---- nobody else gets in ----
code=$(curl -s -o "$T/noauth" -w '%{http_code}' "$URL/notebooks/p1/nb1/api/contents/kept.txt")
check_eq "no token -> 401" "$code" 401
code=$(curl -s -o "$T/other" -w '%{http_code}' -H "Authorization: Bearer $E2" \
    "$URL/notebooks/p1/nb1/api/contents/kept.txt")
check_eq "another project's token -> 404" "$code" 404
check "... and no notebook content" bash -c "! grep -q 'written before stop' '$T/other' '$T/noauth'"
code=$(curl -s -o /dev/null -w '%{http_code}' --cookie "kiln_token=$E2" "$URL/notebooks/p1/nb1/lab")
check_eq "another project's cookie -> 404" "$code" 404
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $V1" "$URL/notebooks/p1/nb1/lab")
check_eq "a viewer token -> 403 (a notebook runs code)" "$code" 403
check_eq "WebSocket without a token -> 401" "$(nb nb1 "" ws-status 2>&1)" 401
check_eq "WebSocket with another project's token -> 404" "$(nb nb1 "$E2" ws-status 2>&1)" 404
check_eq "WebSocket with the token -> 101" "$(nb nb1 "$E1" ws-status 2>&1)" 101
TOKEN=$E2 api GET /v1/projects/p1/locations/us-west1-b/instances/nb1
check_eq "another project's token: the instance is 404" "$STATUS" 404

# ---- GPUs change only while stopped ----
check "update while ACTIVE refused" bash -c "! CLOUDSDK_CONFIG=$T/gc timeout 60 gcloud notebooks instances update nb1 --location us-west1-b --accelerator-core-count 1 --accelerator-type NVIDIA_TESLA_T4 2>$T/upd.err"
check "... saying stop first" grep -q 'stop it first' "$T/upd.err"

# ---- stop: the GPUs go back ----
check "gcloud stop" gc stop nb1
check_eq "STOPPED" "$(desc nb1 | jget state)" STOPPED
check_eq "GPUs given back" "$(allocatable)" 2
check_eq "its job was cancelled" "$(job_state "$job1")" CANCELLED
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $E1" "$URL/notebooks/p1/nb1/lab")
check_eq "a stopped notebook's proxy -> 503" "$code" 503

check "update to 1 GPU while STOPPED" gc update nb1 --accelerator-type NVIDIA_TESLA_T4 --accelerator-core-count 1
check "update machine type while STOPPED" gc update nb1 --machine-type n1-standard-4
check "update labels" gc update nb1 --labels team=research
out=$(desc nb1)
check_eq "accelerator updated" "$(printf '%s' "$out" | jget acceleratorConfig.coreCount)" 1
check_eq "machine type updated" "$(printf '%s' "$out" | jget machineType)" n1-standard-4
check_eq "labels updated" "$(printf '%s' "$out" | jget labels.team)" research

# ---- start: one GPU now, the file still there ----
check "gcloud start" gc start nb1
out=$(desc nb1)
check_eq "ACTIVE again" "$(printf '%s' "$out" | jget state)" ACTIVE
check_eq "1 GPU held" "$(printf '%s' "$out" | jget kiln.gpus)" "[0]"
check_eq "1 GPU taken" "$(allocatable)" 1
check_eq "cell sees 1 GPU" "$(nb nb1 "$E1" run 'import os; print(os.environ["CUDA_VISIBLE_DEVICES"])' 2>&1)" 0
check_eq "the file outlived stop/start" "$(nb nb1 "$E1" get kept.txt 2>&1)" "written before stop"

# ---- reset: a new run, same home ----
job2=$(printf '%s' "$out" | jget kiln.job)
check "gcloud reset" gc reset nb1
out=$(desc nb1)
check_eq "ACTIVE after reset" "$(printf '%s' "$out" | jget state)" ACTIVE
check "reset made a new run" test "$(printf '%s' "$out" | jget kiln.job)" != "$job2"
check_eq "the file outlived reset" "$(nb nb1 "$E1" get kept.txt 2>&1)" "written before stop"

# ---- kill -9 kilnd while ACTIVE: Jupyter runs on, the next kilnd serves it ----
nb nb1 "$E1" put restart.txt "before kill" >/dev/null
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")
check_eq "kilnd is gone" "$code" 000
start_kilnd "$T/d" --node-config "$T/nodes.json" --tokens "$T/tokens" --notebook-python "$NBPY" \
    --bucket nb-stage:p1 --max-inflight-per-token 4
gc_set
check "ACTIVE through the next kilnd" wait_nb nb1 ACTIVE 30
# open WebSockets are no requests in flight: 6 of them leave the token's 4
check_eq "WebSockets do not hold the token's in-flight places" \
    "$(nb nb1 "$E1" ws-hold 6 "$URL/v1/projects/p1/locations/-/instances" 2>&1)" 200
check_eq "same run (adopted, not restarted)" "$(desc nb1 | jget kiln.job)" "$(printf '%s' "$out" | jget kiln.job)"
check_eq "reachable after the restart" "$(nb nb1 "$E1" get restart.txt 2>&1)" "before kill"
check_eq "a cell after the restart" "$(nb nb1 "$E1" run 'print(6*7)' 2>&1)" 42

# ---- refused, naming the field ----
gc create bad1 --container-repository gcr.io/x/y --container-tag 1 >/dev/null 2>"$T/r1.err"
check "containerImage refused by name" grep -q containerImage "$T/r1.err"
gc create bad2 --vm-image-project deeplearning-platform-release --vm-image-family common-cpu \
    --metadata startup-script=x >/dev/null 2>"$T/r2.err"
check "unknown metadata key refused by name" grep -q 'metadata.startup-script' "$T/r2.err"
gc create bad3 --vm-image-project deeplearning-platform-release --vm-image-family windows-2019 \
    >/dev/null 2>"$T/r3.err"
check "unknown image family refused" grep -q 'windows-2019' "$T/r3.err"
gc create bad4 --vm-image-project deeplearning-platform-release --vm-image-family common-cpu \
    --accelerator-type NVIDIA_TESLA_T4 --accelerator-core-count 3 >/dev/null 2>"$T/r4.err"
check "3 x T4 refused (catalog's counts)" grep -q 'acceleratorConfig' "$T/r4.err"
gc create bad5 --vm-image-project deeplearning-platform-release --vm-image-family common-cpu \
    --post-startup-script gs://not-held/x.sh >/dev/null 2>"$T/r5.err"
check "a postStartupScript outside the staging store refused" grep -q 'postStartupScript' "$T/r5.err"
check_eq "nothing refused was made" "$(gc list --format 'value(name.basename())' 2>&1)" nb1

# ---- postStartupScript: a gs:// object of kilnd's staging store, run before JupyterLab ----
printf 'echo "ran in $(pwd) as $(id -u), TF_CONFIG=${TF_CONFIG:-none}" >post-ran.txt\n' >"$T/post.sh"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $E1" --data-binary @"$T/post.sh" \
    "$URL/upload/storage/v1/b/nb-stage/o?uploadType=media&name=post.sh")
check_eq "upload the script" "$code" 200
check "create nb3 with --post-startup-script" gc create nb3 \
    --vm-image-project deeplearning-platform-release --vm-image-family common-cpu \
    --post-startup-script gs://nb-stage/post.sh
check_eq "the script ran in the home before JupyterLab" "$(cat "$T/d/notebooks/p1/nb3/post-ran.txt" 2>&1)" \
    "ran in $T/d/notebooks/p1/nb3 as $(id -u), TF_CONFIG=none"
check "gcloud delete nb3" gc delete nb3 --quiet

# ---- idle shutdown (fractional minutes: 0.1 = 6 s; room for a loaded machine) ----
check "create nb2 with idle-shutdown-timeout" gc create nb2 --async \
    --vm-image-project deeplearning-platform-release --vm-image-family pytorch-latest-gpu \
    --accelerator-type NVIDIA_TESLA_T4 --accelerator-core-count 1 \
    --metadata idle-shutdown-timeout=0.1 --no-remove-data-disk
check "nb2 ACTIVE" wait_nb nb2 ACTIVE 60
# a kernel busy in a silent cell for 14 s is no idleness
check_eq "a silent 14 s cell outlives a 6 s idle timeout" \
    "$(nb nb2 "$E1" run 'import time; time.sleep(14); print("done")' 2>&1)" done
check "idle nb2 stops by itself" wait_nb nb2 STOPPED 40
check "... saying why" grep -q 'idle-shutdown-timeout' <<<"$(desc nb2)"
check_eq "... and its GPU is back" "$(allocatable)" 1

# ---- delete: the home goes, unless noRemoveDataDisk ----
check "gcloud delete nb1" gc delete nb1 --quiet
check "nb1's home is gone" test ! -e "$T/d/notebooks/p1/nb1"
check "gcloud delete nb2" gc delete nb2 --quiet
check "nb2's home is kept (noRemoveDataDisk)" test -d "$T/d/notebooks/p1/nb2"
check_eq "list empty" "$(gc list --format 'value(name)' 2>&1)" ""
check_eq "every GPU free" "$(allocatable)" 2
finish

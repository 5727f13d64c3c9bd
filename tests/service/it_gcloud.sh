#!/bin/bash
# tests/service/it_gcloud.sh - the real Google Cloud CLI against a real kilnd:
# `gcloud ai-platform jobs` describe, list, update, cancel, stream-logs and
# submit training (a custom-container job, which needs no upload), and
# `gcloud logging read`, through api_endpoint_overrides; auth through
# auth/access_token_file with a kiln token; and gcloud over HTTPS, verifying
# kilnd's certificate against the site's CA (REQUESTS_CA_BUNDLE).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need gcloud podman openssl
# the submitted job's image runs as a container (kiln's container executor):
# one built here from the host's /usr, nothing pulled (lib.sh host_image)
IMG=localhost/kiln-examples/trainer:1
host_image "$IMG" || {
    fail "cannot build the image $IMG"
    finish
}
printf '{"nodes": [{"name": "vm", "address": "127.0.0.1"}], %s}\n' \
    "$(host_runtime_config "$T")" >"$T/host.json"

start_kilnd "$T/d" --node-config "$T/host.json"

# a throwaway gcloud configuration pointed at this kilnd
gc_config() { # gc_config DIR URL PROJECT [auth lines as PROPERTY VALUE pairs...]
    local dir=$1 url=$2 project=$3
    shift 3
    mkdir -p "$dir"
    set -- core/project "$project" core/disable_usage_reporting true \
        component_manager/disable_update_check true api_endpoint_overrides/ml "$url/" \
        api_endpoint_overrides/logging "$url/" ml_engine/polling_interval 5 "$@"
    while [ $# -ge 2 ]; do
        CLOUDSDK_CONFIG=$dir gcloud config set "$1" "$2" >/dev/null 2>&1 || fail "config set $1"
        shift 2
    done
}
gc_config "$T/gc" "$URL" p1 auth/disable_credentials true
gc() { CLOUDSDK_CONFIG=$T/gc timeout 120 gcloud "$@"; }

# jobs made through kiln's own API (gcloud's submit needs uploads for packages)
api POST /v1/projects/p1/jobs "$(job_json fin_1 'for i in 1 2 3; do echo tick $i; echo oops $i >&2; done')"
check_eq "create fin_1" "$STATUS" 200
api POST /v1/projects/p1/jobs "$(job_json run_1 'sleep 600')"
check "fin_1 succeeds" wait_state fin_1 SUCCEEDED 30
check "run_1 runs" wait_state run_1 RUNNING 30

# describe: the etag is base64 (a bytes field: gcloud decodes it), kiln's own
# kilnStatus is kept as an unrecognised field
out=$(gc ai-platform jobs describe fin_1 --format json 2>"$T/err")
check "describe works ($(head -c 300 "$T/err"))" test -n "$out"
check_eq "describe state" "$(printf '%s' "$out" | jget state)" SUCCEEDED
etag=$(printf '%s' "$out" | jget etag)
raw=$(printf '%s' "$etag" | "$PY" -c 'import base64,sys; print(base64.urlsafe_b64decode(sys.stdin.read().strip()).decode())' 2>/dev/null)
check "etag decodes to seq-version ($etag -> $raw)" grep -qE '^[0-9]+-[0-9]+$' <<<"$raw"
check_eq "kilnStatus kept" "$(printf '%s' "$out" | jget kilnStatus.replicas.0.task)" master-replica-0
check "endTime printed" test -n "$(printf '%s' "$out" | jget endTime)"

# list with --filter and --limit (gcloud filters and limits on its side)
out=$(gc ai-platform jobs list --format 'value(jobId)' 2>&1)
check_eq "list" "$(printf '%s' "$out" | sort | tr '\n' ' ')" "fin_1 run_1 "
check_eq "list --filter" "$(gc ai-platform jobs list --filter 'jobId:run*' --format 'value(jobId)' 2>&1)" run_1
check_eq "list --filter state" "$(gc ai-platform jobs list --filter 'state=SUCCEEDED' --format 'value(jobId)' 2>&1)" fin_1
check_eq "list --limit" "$(gc ai-platform jobs list --limit 1 --format 'value(jobId)' 2>&1 | wc -l)" 1

# update --update-labels / --remove-labels
check "update --update-labels" gc ai-platform jobs update run_1 --update-labels env=prod,team=ml
check_eq "labels set" "$(gc ai-platform jobs describe run_1 --format 'value(labels.env,labels.team)' 2>&1)" "prod	ml"
check "update --remove-labels" gc ai-platform jobs update run_1 --remove-labels team
check_eq "label removed" "$(gc ai-platform jobs describe run_1 --format 'value(labels)' 2>&1)" "env=prod"

# a stale etag (gcloud sends none on update, so curl does): 409 ABORTED
api GET /v1/projects/p1/jobs/run_1
cur=$(printf '%s' "$BODY" | jget etag)
gc ai-platform jobs update run_1 --update-labels step=2 >/dev/null 2>&1
api PATCH "/v1/projects/p1/jobs/run_1?updateMask=labels" "{\"labels\":{\"x\":\"y\"},\"etag\":\"$cur\"}"
check_eq "stale etag -> 409" "$STATUS" 409
check_eq "stale etag -> ABORTED" "$(printf '%s' "$BODY" | jget error.status)" ABORTED
api GET /v1/projects/p1/jobs/run_1
cur=$(printf '%s' "$BODY" | jget etag)
api PATCH "/v1/projects/p1/jobs/run_1?updateMask=labels" "{\"labels\":{\"env\":\"prod\"},\"etag\":\"$cur\"}"
check_eq "current etag -> 200" "$STATUS" 200
# the raw seq-version form of earlier kilnds is still accepted
cur=$(printf '%s' "$BODY" | jget etag)
raw=$(printf '%s' "$cur" | "$PY" -c 'import base64,sys; print(base64.urlsafe_b64decode(sys.stdin.read().strip()).decode())')
api PATCH "/v1/projects/p1/jobs/run_1?updateMask=labels" "{\"labels\":{\"env\":\"prod\"},\"etag\":\"$raw\"}"
check_eq "raw etag -> 200" "$STATUS" 200
api PATCH "/v1/projects/p1/jobs/run_1?updateMask=labels" "{\"labels\":{\"env\":\"prod\"},\"etag\":\"$raw\"}"
check_eq "stale raw etag -> 409" "$STATUS" 409
# kiln's own CLI echoes the (now base64) etag it read
check "kiln jobs update" "$KILN" jobs update run_1 --update-labels via=kiln
check_eq "kiln's update landed" "$(gc ai-platform jobs describe run_1 --format 'value(labels.via)' 2>&1)" kiln

# stream-logs of a finished job: every line once, in order, then it returns
out=$(gc ai-platform jobs stream-logs fin_1 2>&1)
check_eq "stream-logs (ended) exit" "$?" 0
check_eq "stream-logs ticks once each, in order" "$(printf '%s\n' "$out" | grep -o 'tick [0-9]' | tr '\n' ' ')" "tick 1 tick 2 tick 3 "
check "stream-logs stderr is ERROR" grep -qE '^ERROR.*master-replica-0.*oops 1' <<<"$out"
check "stream-logs service lines" grep -q "Job completed successfully" <<<"$out"
out=$(gc ai-platform jobs stream-logs fin_1 --task-name master-replica-0 2>&1)
check_eq "--task-name lines" "$(printf '%s\n' "$out" | grep -c 'master-replica-0')" 6
check_eq "--task-name only that task" "$(printf '%s\n' "$out" | grep -c 'service')" 0

# stream-logs of a running job: it follows the job and returns when it ends
api POST /v1/projects/p1/jobs "$(job_json str_1 'for i in 1 2 3 4; do echo step $i; sleep 1; done')"
check "str_1 runs" wait_state str_1 RUNNING 30
out=$(gc ai-platform jobs stream-logs str_1 --polling-interval 5 2>&1)
check_eq "stream-logs (running) exit" "$?" 0
check_eq "stream-logs followed every line" "$(printf '%s\n' "$out" | grep -o 'step [0-9]' | tr '\n' ' ')" "step 1 step 2 step 3 step 4 "
check_eq "str_1 ended" "$(job_state str_1)" SUCCEEDED

# submit training: a custom-container job (containerCommand runs as a plain
# process) needs no package upload
cat >"$T/config.yaml" <<'EOF'
trainingInput:
  scaleTier: BASIC
  masterConfig:
    containerCommand: ["sh", "-c", "echo hello from gcloud; echo args: $*", "sh"]
    containerArgs: ["--epochs", "2"]
EOF
out=$(gc ai-platform jobs submit training sub_1 --region us-central1 --config "$T/config.yaml" \
    --master-image-uri "$IMG" --labels team=ml --stream-logs 2>&1)
rc=$?
check_eq "submit --stream-logs exit ($(tail -3 <<<"$out"))" "$rc" 0
check "submit printed the job's lines" grep -q "hello from gcloud" <<<"$out"
check "user args reached the program" grep -q "args: --epochs 2" <<<"$out"
check_eq "submitted job" "$(gc ai-platform jobs describe sub_1 --format 'value(state,labels.team)' 2>&1)" "SUCCEEDED	ml"
# user args after -- do not mix with containerCommand: a 400 that says so
out=$(gc ai-platform jobs submit training sub_2 --region us-central1 --config "$T/config.yaml" \
    --master-image-uri "$IMG" -- --epochs 3 2>&1)
check "submit -- ARGS with containerCommand refused" test $? -ne 0
check "... saying why ($out)" grep -q containerArgs <<<"$out"

# cancel
check "cancel" gc ai-platform jobs cancel run_1
check "cancelled" wait_state run_1 CANCELLED 30
out=$(gc ai-platform jobs cancel fin_1 2>&1)
check "cancel of an ended job fails" test $? -ne 0
check "... with FAILED_PRECONDITION" grep -q FAILED_PRECONDITION <<<"$out"
out=$(gc ai-platform jobs describe nope_1 2>&1)
check "describe missing -> NOT_FOUND ($out)" grep -q NOT_FOUND <<<"$out"

# gcloud logging read with a filter
out=$(gc logging read 'resource.type=ml_job AND resource.labels.job_id=fin_1 AND severity>=ERROR' \
    --order asc --format 'value(jsonPayload.message)' 2>&1)
check_eq "logging read severity filter" "$(printf '%s' "$out" | tr '\n' ' ')" "oops 1 oops 2 oops 3"
out=$(gc logging read 'resource.labels.job_id=fin_1 AND resource.labels.task_name="master-replica-0"' \
    --limit 2 --format 'value(jsonPayload.message)' 2>&1)
# the newest two by (timestamp, position in the log), computed from log.tsv
want=$("$PY" -c '
import sys
rows, off = [], 0
for line in open(sys.argv[1], "rb"):
    f = line.decode().rstrip("\n").split("\t", 3)
    if f[2] == "master-replica-0": rows.append((f[1], off, f[3]))
    off += len(line)
print(" ".join(r[2] for r in sorted(rows, reverse=True)[:2]))' "$T/d/jobs/p1/fin_1/log.tsv")
check_eq "logging read --limit, newest first" "$(printf '%s' "$out" | tr '\n' ' ')" "$want"
out=$(gc logging read 'jsonPayload.message:tick' 2>&1)
check "unserved filter term refused" test $? -ne 0
check "... naming it ($out)" grep -q jsonPayload.message <<<"$out"

# entries:list directly: pages never repeat or drop a line
want=$(grep -c . "$T/d/jobs/p1/fin_1/log.tsv")
tok="" got="" pages=0
while :; do
    api POST /v2/entries:list "{\"resourceNames\":[\"projects/p1\"],\"filter\":\"resource.labels.job_id=fin_1\",\"pageSize\":2${tok:+,\"pageToken\":\"$tok\"}}"
    [ "$STATUS" = 200 ] || break
    got="$got$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; [print(e["insertId"]) for e in json.load(sys.stdin).get("entries",[])]')
"
    pages=$((pages + 1))
    tok=$(printf '%s' "$BODY" | jget nextPageToken)
    [ -n "$tok" ] && [ "$pages" -lt 100 ] || break
done
check_eq "paged entries" "$(printf '%s' "$got" | grep -c .)" "$want"
check_eq "no repeats" "$(printf '%s' "$got" | grep . | sort -u | wc -l)" "$want"
api POST /v2/entries:list '{"resourceNames":["projects/p1"],"filter":"textPayload:x"}'
check_eq "bad filter -> 400" "$STATUS" 400
check "bad filter named" grep -q textPayload <<<"$BODY"
api POST /v2/entries:list '{"resourceNames":["organizations/1"]}'
check_eq "non-project resource -> 400" "$STATUS" 400
api POST /v2/entries:list '{"resourceNames":["projects/p1"],"projectIds":["p1"]}'
check_eq "unserved field -> 400" "$STATUS" 400
check "unserved field named" grep -q projectIds <<<"$BODY"
api POST /v2/entries:list '{"resourceNames":["projects/p1"],"pageSize":-1}'
check_eq "bad pageSize -> 400" "$STATUS" 400
api POST /v2/entries:list '{'
check_eq "malformed body -> 400" "$STATUS" 400
api GET /v2/entries:list
check_eq "GET -> 405" "$STATUS" 405
api POST /v2/entries:tail '{}'
check_eq "other Logging methods -> 404" "$STATUS" 404

# auth: a kiln token through auth/access_token_file; other projects are 404
E1=editor-p1-0123456789abcdef
E2=editor-p2-0123456789abcdef
V1=viewer-p1-0123456789abcdef
printf '%s p1 editor\n%s p2 editor\n%s p1 viewer\n' "$E1" "$E2" "$V1" >"$T/tokens"
chmod 600 "$T/tokens"
start_kilnd "$T/auth" --tokens "$T/tokens"
TOKEN=$E1 api POST /v1/projects/p1/jobs "$(job_json sec_1 'echo secret line')"
check_eq "create with token" "$STATUS" 200
TOKEN=$E1 wait_state sec_1 SUCCEEDED 30 || true
printf '%s\n' "$E1" >"$T/tok1"
printf '%s\n' "$E2" >"$T/tok2"
gc_config "$T/ga1" "$URL" p1 auth/access_token_file "$T/tok1"
gc_config "$T/ga2" "$URL" p1 auth/access_token_file "$T/tok2"
printf '%s\n' "$V1" >"$T/tokv"
gc_config "$T/gav" "$URL" p1 auth/access_token_file "$T/tokv"
gc_config "$T/ga0" "$URL" p1 auth/disable_credentials true
out=$(CLOUDSDK_CONFIG=$T/ga1 timeout 60 gcloud ai-platform jobs list --format 'value(jobId)' 2>&1)
check_eq "token: list" "$out" sec_1
out=$(CLOUDSDK_CONFIG=$T/ga1 timeout 60 gcloud ai-platform jobs stream-logs sec_1 2>&1)
check "token: stream-logs" grep -q "secret line" <<<"$out"
out=$(CLOUDSDK_CONFIG=$T/ga2 timeout 60 gcloud ai-platform jobs describe sec_1 2>&1)
check "other project's token: NOT_FOUND ($out)" grep -q NOT_FOUND <<<"$out"
out=$(CLOUDSDK_CONFIG=$T/ga2 timeout 60 gcloud logging read 'resource.labels.job_id=sec_1' 2>&1)
check "other project's token: logs NOT_FOUND ($out)" grep -q NOT_FOUND <<<"$out"
out=$(CLOUDSDK_CONFIG=$T/gav timeout 60 gcloud logging read 'resource.labels.job_id=sec_1' --format 'value(jsonPayload.message)' 2>&1)
check "viewer token: logging read ($out)" grep -q "secret line" <<<"$out"
out=$(CLOUDSDK_CONFIG=$T/gav timeout 60 gcloud ai-platform jobs update sec_1 --update-labels a=b 2>&1)
check "viewer token: update PERMISSION_DENIED ($out)" grep -q PERMISSION_DENIED <<<"$out"
out=$(CLOUDSDK_CONFIG=$T/ga0 timeout 60 gcloud ai-platform jobs list 2>&1)
check "no token: UNAUTHENTICATED ($out)" grep -q UNAUTHENTICATED <<<"$out"

# HTTPS: gcloud verifies kilnd's certificate against the site's CA file, and
# refuses a kilnd it cannot verify
for name in site other; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$T/$name.key" -out "$T/$name.crt" -days 2 -subj "/CN=$name" \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
    chmod 600 "$T/$name.key"
done
start_kilnd "$T/tls" --tokens "$T/tokens" --tls-cert "$T/site.crt" --tls-key "$T/site.key"
URL=https://$(cat "$T/tls/kilnd.addr")
CURL_CA_BUNDLE=$T/site.crt TOKEN=$E1 api POST /v1/projects/p1/jobs "$(job_json tls_1 'echo over tls')"
check_eq "create over https" "$STATUS" 200
# gcloud 528 sends api_endpoint_overrides requests through python-requests,
# which verifies against REQUESTS_CA_BUNDLE; core/custom_ca_certs_file (and
# its CLOUDSDK_CORE_ environment form) did not reach them here
gc_config "$T/gtls" "$URL" p1 auth/access_token_file "$T/tok1"
gtls() { CLOUDSDK_CONFIG=$T/gtls REQUESTS_CA_BUNDLE=$1 timeout 60 gcloud "${@:2}"; }
out=$(gtls "$T/site.crt" ai-platform jobs list --format 'value(jobId)' 2>&1)
check_eq "https: gcloud lists with the site's CA" "$out" tls_1
out=$(gtls "$T/site.crt" ai-platform jobs describe tls_1 --format 'value(jobId)' 2>&1)
check_eq "https: gcloud describes" "$out" tls_1
out=$(gtls "$T/other.crt" ai-platform jobs list --format 'value(jobId)' 2>&1)
check "https: gcloud refuses a certificate it cannot verify ($(head -c 200 <<<"$out"))" \
    grep -qiE 'certificate verify failed|CERTIFICATE_VERIFY_FAILED|SSL' <<<"$out"

finish

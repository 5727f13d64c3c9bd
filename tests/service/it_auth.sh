#!/bin/bash
# tests/service/it_auth.sh - the tokens file: bearer tokens mapped to a
# project and a role (viewer, editor); another project's jobs are 404, not
# 403; a non-loopback --listen without tokens is refused at start.
. "$(dirname "$0")/lib.sh"

# refused: non-loopback without tokens
"$KILND" --listen 0.0.0.0:0 --data-dir "$T/refused" 2>"$T/refused.err"
check_eq "non-loopback without tokens refused" "$?" 1
check "refusal says why" grep -q "without --tokens" "$T/refused.err"
check "nothing served" test ! -e "$T/refused/kilnd.addr"

# other start-up refusals: bad node config (named field), bad catalog, unknown flag
printf '{"nodes":[{"name":"x","accelerators":[{"type":"NVIDIA_TESLA_V100","count":0}]}]}' >"$T/badnodes.json"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/bn" --node-config "$T/badnodes.json" 2>"$T/bn.err"
check_eq "bad node config refused" "$?" 1
check "bad node config names the field" grep -q 'nodes\[0\].accelerators\[0\]' "$T/bn.err"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/bn" --node-config "$T/missing.json" 2>/dev/null
check_eq "missing node config refused" "$?" 1
"$KILND" --bogus 1 2>/dev/null
check_eq "unknown flag refused" "$?" 1
"$KILND" --help >/dev/null
check_eq "--help" "$?" 0

E1=editor-p1-0123456789abcdef
V1=viewer-p1-0123456789abcdef
E2=editor-p2-0123456789abcdef
ADM=admin-all-0123456789abcdef
cat >"$T/tokens" <<EOF
# token                     project  role
$E1 p1 editor
$V1 p1 viewer
$E2 p2 editor
$ADM * editor
EOF
chmod 644 "$T/tokens"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/warn" --tokens "$T/tokens" 2>"$T/warn.err"
check_eq "world-readable tokens file refused" "$?" 1
check "refusal names the fix" grep -q "chmod 600" "$T/warn.err"
check "nothing served" test ! -e "$T/warn/kilnd.addr"
chmod 600 "$T/tokens"
printf 'short p1 editor\n' >"$T/badtokens"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/bad" --tokens "$T/badtokens" 2>"$T/bad.err"
check_eq "short token refused" "$?" 1

start_kilnd "$T/d" --tokens "$T/tokens"

TOKEN="" api GET /v1/projects/p1/jobs
check_eq "no token -> 401" "$STATUS" 401
check_eq "401 envelope" "$(printf '%s' "$BODY" | jget error.status)" UNAUTHENTICATED
TOKEN=nope-0123456789abcdef api GET /v1/projects/p1/jobs
check_eq "unknown token -> 401" "$STATUS" 401

TOKEN=$E1 api POST /v1/projects/p1/jobs "$(job_json secret_1 'sleep 20')"
check_eq "editor creates" "$STATUS" 200
TOKEN=$V1 api GET /v1/projects/p1/jobs/secret_1
check_eq "viewer reads" "$STATUS" 200
TOKEN=$V1 api POST /v1/projects/p1/jobs "$(job_json v_1 'true')"
check_eq "viewer cannot create" "$STATUS" 403
TOKEN=$V1 api POST /v1/projects/p1/jobs/secret_1:cancel '{}'
check_eq "viewer cannot cancel" "$STATUS" 403
TOKEN=$E2 api GET /v1/projects/p1/jobs/secret_1
check_eq "other project's job -> 404" "$STATUS" 404
TOKEN=$E2 api GET /v1/projects/p1/jobs
check_eq "other project's list -> 404" "$STATUS" 404
TOKEN=$E2 api POST /v1/projects/p1/jobs/secret_1:cancel '{}'
check_eq "other project's cancel -> 404" "$STATUS" 404
TOKEN=$E2 api GET /v1/projects/p1/jobs/secret_1:logs
check_eq "other project's logs -> 404" "$STATUS" 404
TOKEN=$E2 api GET /v1/projects/p2/jobs
check_eq "own empty project" "$STATUS" 200
TOKEN=$E1 api GET /v1/nodes
check_eq "nodes readable" "$STATUS" 200
node=$(printf '%s' "$BODY" | jget nodes.0.name)
TOKEN=$E1 api POST "/v1/nodes/$node:drain" '{}'
check_eq "project editor cannot drain" "$STATUS" 403
TOKEN=$ADM api POST "/v1/nodes/$node:uncordon" '{}'
check_eq "admin can uncordon" "$STATUS" 200

# the CLI sends KILN_TOKEN
KILN_TOKEN=$V1 "$KILN" jobs describe secret_1 >/dev/null 2>&1
check_eq "cli with viewer token" "$?" 0
KILN_TOKEN=$E2 "$KILN" jobs describe secret_1 >/dev/null 2>&1
check_eq "cli other project -> not found" "$?" 3
KILN_TOKEN=$V1 "$KILN" jobs cancel secret_1 >/dev/null 2>&1
check_eq "cli viewer cancel -> denied" "$?" 4
KILN_TOKEN=$E1 "$KILN" jobs cancel secret_1 >/dev/null 2>&1
check_eq "cli editor cancel" "$?" 0
TOKEN=$E1 wait_state secret_1 CANCELLED 10 >/dev/null 2>&1 || true
TOKEN=$E1 api GET /v1/projects/p1/jobs/secret_1
check_eq "cancelled" "$(printf '%s' "$BODY" | jget state)" CANCELLED

finish

#!/bin/bash
# tests/service/it_badbody.sh - every kind of body the jobs API refuses is
# refused naming the field and the rule or limit it broke: the decoder's
# limits (the int32 range, NUL characters, entries of a map, items of a
# list, bytes of a string), JSON that does not parse (the field where it
# stops), the catalog's rules, and the body as a whole (empty, not an
# object, over --max-body). For each: the status, the message
# ("Field: F Error: WHAT", as the catalog's refusals have always been), the
# first fieldViolation's field, and the words of the rule. No refusal may
# say only "invalid input".
. "$(dirname "$0")/lib.sh"

start_kilnd "$T/d"
JOBS=/v1/projects/p1/jobs
n=0

# send METHOD PATH FILE: the body from a file (some are larger than one
# command-line argument may be); sets STATUS and BODY
send() {
    local out
    out=$(curl -s -m 20 -w '\n%{http_code}' -X "$1" -H 'Content-Type: application/json' \
        --data-binary "@$3" "$URL$2")
    STATUS=${out##*$'\n'}
    BODY=${out%$'\n'*}
}

# refused NAME STATUS FIELD RULE [METHOD PATH]: sends $T/body.NAME (made by
# the caller); FIELD "" is a refusal of the body as a whole
refused() {
    local name=$1 want=$2 field=$3 rule=$4 method=${5:-POST} path=${6:-$JOBS}
    local msg f0
    n=$((n + 1))
    send "$method" "$path" "$T/body.$name"
    msg=$(printf '%s' "$BODY" | jget error.message)
    f0=$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)
    check_eq "$name: status" "$STATUS" "$want"
    if [ -n "$field" ]; then
        check_eq "$name: the first violation's field" "$f0" "$field"
        case $msg in
        "Field: $field Error: "*) ok ;;
        *) fail "$name: the message does not name $field: '$msg'" ;;
        esac
    fi
    case $msg in
    *"$rule"*) ok ;;
    *) fail "$name: the message does not say '$rule': '$msg'" ;;
    esac
    case $msg in
    *"invalid input"*) fail "$name: the message says only 'invalid input': '$msg'" ;;
    *) ok ;;
    esac
}

# body NAME JSON: writes $T/body.NAME (printf: \\u0000 stays JSON's escape)
body() { printf '%s' "$2" >"$T/body.$1"; }
# a valid job with the trainingInput members "$2" added
job() { body "$1" "{\"jobId\":\"j$n\",\"trainingInput\":{\"scaleTier\":\"BASIC\",\"region\":\"us-central1\",\"pythonModule\":\"m\"$2}}"; }

# ---- the decoder's limits ----
job priority_int32 ',"scheduling":{"priority":99999999999}'
refused priority_int32 400 trainingInput.scheduling.priority "an int32 holds -2147483648 to 2147483647"
job priority_rule ',"scheduling":{"priority":5000}'
refused priority_rule 400 trainingInput.scheduling.priority "5000 is outside 0..1000"
job nul_arg ',"args":["--ok","--lr\u0000=9"]'
refused nul_arg 400 "trainingInput.args[1]" "NUL character"
job nul_env ',"masterConfig":{"env":{"FOO":"a\u0000b"}}'
refused nul_env 400 trainingInput.masterConfig.env.FOO "NUL character"
body nul_enum '{"jobId":"a","trainingInput":{"scaleTier":"BASIC\u0000x","region":"us-central1"}}'
refused nul_enum 400 trainingInput.scaleTier "NUL character"
job nul_int ',"workerCount":"2\u0000"'
refused nul_int 400 trainingInput.workerCount "NUL character"
job nul_duration ',"scheduling":{"maxRunningTime":"60s\u0000junk"}'
refused nul_duration 400 trainingInput.scheduling.maxRunningTime "NUL character"
body nul_key '{"jobId":"a","labels":{"a\u0000b":"x"},"trainingInput":{"scaleTier":"BASIC","region":"us-central1"}}'
refused nul_key 400 labels "a key holds a NUL character"
"$PY" -c 'import json,sys; print(json.dumps({"jobId": "a", "labels": {"k%d" % i: "v" for i in range(10000)}, "trainingInput": {"scaleTier": "BASIC", "region": "us-central1"}}))' >"$T/body.labels_10000"
refused labels_10000 400 labels "10000 entries; at most 4096 are allowed"
"$PY" -c 'import json,sys; print(json.dumps({"jobId": "a", "labels": {"k%d" % i: "v" for i in range(100)}, "trainingInput": {"scaleTier": "BASIC", "region": "us-central1"}}))' >"$T/body.labels_100"
refused labels_100 400 labels "100 labels; at most 64 are allowed"
"$PY" -c 'import json,sys; print(json.dumps({"jobId": "a", "trainingInput": {"scaleTier": "BASIC", "region": "us-central1", "args": ["x"] * 100000}}))' >"$T/body.args_100000"
refused args_100000 400 trainingInput.args "100000 items; at most 4096 are allowed"
job long_string ",\"jobDir\":\"/$(head -c 70000 /dev/zero | tr '\0' a)\""
refused long_string 400 trainingInput.jobDir "value is 70001 bytes; at most 65536 are allowed"
job unknown_field ',"workrCount":"2"'
refused unknown_field 400 trainingInput.workrCount 'unknown field "workrCount" in TrainingInput; did you mean "workerCount"?'
job wrong_type ',"workerCount":true'
refused wrong_type 400 trainingInput.workerCount "expected a whole number, got a boolean"
job not_int ',"workerCount":"two"'
refused not_int 400 trainingInput.workerCount '"two" is not a whole number (int64)'
job bad_duration ',"scheduling":{"maxRunningTime":"1h"}'
refused bad_duration 400 trainingInput.scheduling.maxRunningTime 'expected a duration such as "3600s"'
body bad_enum '{"jobId":"a","trainingInput":{"scaleTier":"HUGE","region":"us-central1"}}'
refused bad_enum 400 trainingInput.scaleTier '"HUGE" is not one of: BASIC'

# ---- JSON that does not parse: the field where it stops ----
job syntax ',"args":["x",]'
refused syntax 400 "trainingInput.args[1]" "unexpected token near ']'"
body duplicate '{"jobId":"a","trainingInput":{"region":"us-central1","region":"us-east1"}}'
refused duplicate 400 trainingInput "duplicate object key near '\"region\"'"
printf '{"jobId":"a\xff","trainingInput":{}}' >"$T/body.utf8"
refused utf8 400 jobId "unable to decode byte 0xff"
job big_int ',"workerCount":99999999999999999999999'
refused big_int 400 trainingInput.workerCount "too big integer"
deep=$("$PY" -c 'print("[" * 3000 + "]" * 3000)')
job deep ",\"args\":$deep"
send POST "$JOBS" "$T/body.deep"
check_eq "deep: status" "$STATUS" 400
f0=$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)
case $f0 in "trainingInput.args[0][0][0]"*"...") ok ;; *) fail "deep: field '$f0'" ;; esac
check "deep: the depth limit is named" grep -q "maximum parsing depth" <<<"$BODY"

# ---- the catalog's rules ----
body job_id '{"jobId":"1st","trainingInput":{"scaleTier":"BASIC","region":"us-central1","pythonModule":"m"}}'
refused job_id 400 jobId "letters, digits and underscores, starting with a letter"
body label_value '{"jobId":"a","labels":{"team":"ML Team"},"trainingInput":{"scaleTier":"BASIC","region":"us-central1","pythonModule":"m"}}'
refused label_value 400 labels.team "label value 'ML Team' is invalid"

# ---- the body as a whole ----
: >"$T/body.empty"
refused empty 400 "" "The request body is empty"
body array '[{"jobId":"a"}]'
refused array 400 "" "expected an object (Job), got a list"
head -c 1100000 /dev/zero | tr '\0' ' ' >"$T/body.too_big"
refused too_big 413 "" "larger than 1048576 bytes (kilnd --max-body)"

# ---- PATCH (labels): the same rules, the same form ----
api POST "$JOBS" "$(job_json good true)"
check_eq "a valid job is created" "$STATUS" 200
body patch_mask '{"labels":{"a":"b"}}'
refused patch_mask 400 updateMask "only 'labels' can be updated" PATCH "$JOBS/good?updateMask=trainingInput"
body patch_label '{"labels":{"team":"ML Team"}}'
refused patch_label 400 labels.team "label value 'ML Team' is invalid" PATCH "$JOBS/good?updateMask=labels"
body patch_nul '{"labels":{"team":"a\u0000b"}}'
refused patch_nul 400 labels.team "NUL character" PATCH "$JOBS/good?updateMask=labels"
body patch_syntax '{"labels":{"team":}}'
refused patch_syntax 400 labels.team "unexpected token near '}'" PATCH "$JOBS/good?updateMask=labels"

echo "$n kinds of bad body sent"
finish

#!/bin/bash
# tests/service/it_root.sh - a job kilnd could never start because of who
# its replicas would run as is refused when it is created (400
# FAILED_PRECONDITION naming what to change), never accepted to fail at
# placement; and kilnd says at start, on stderr, which jobs it will refuse
# as configured. As root (the CI's case):
#   - no tokens file, no --allow-root-replicas: every job refused, naming
#     --allow-root-replicas and the tokens file's 'project P user U';
#   - a tokens file naming p1's user (nobody) and p3's as root: p1's job is
#     accepted, p2's (no line) and p3's (root) are refused;
#   - --allow-root-replicas yes (a single-user machine): accepted, no warning.
# Not as root: a project whose user is another (root) is refused, since
# kilnd cannot switch to it; a project without a line is accepted.
# Needs no probe: nothing runs as another user (p1's job is cancelled while
# queued, or its replicas run as nobody and end).
. "$(dirname "$0")/lib.sh"

# create PROJECT JOB: POST a job (kiln's own `true`), sets STATUS and BODY
create() { api POST "/v1/projects/$1/jobs" "$(job_json "$2" true)"; }
msg() { printf '%s' "$BODY" | jget error.message; }
refused() { # refused WHAT PROJECT JOB WORDS...: a 400 FAILED_PRECONDITION naming WORDS
    local what=$1 p=$2 j=$3 w
    shift 3
    create "$p" "$j"
    check_eq "$what: status" "$STATUS" 400
    check_eq "$what: FAILED_PRECONDITION" "$(printf '%s' "$BODY" | jget error.status)" \
        FAILED_PRECONDITION
    for w in "$@"; do
        case $(msg) in *"$w"*) ok ;; *) fail "$what: the message lacks '$w': $(msg)" ;; esac
    done
    api GET "/v1/projects/$p/jobs/$j"
    check_eq "$what: nothing was stored" "$STATUS" 404
}

if [ "$(id -u)" = 0 ]; then
    # no tokens, no --allow-root-replicas: kilnd says so, and refuses all
    NO_ROOT_OK=1 start_kilnd "$T/a"
    check "at start: every job will be refused" grep -q \
        "kilnd: as configured, kilnd will refuse every job of every project: it runs as root" \
        "$T/a/kilnd.err"
    check "at start: what to do" grep -q \
        "'project P user U', kilnd --tokens FILE), or, on a single-user machine, start kilnd with --allow-root-replicas yes" \
        "$T/a/kilnd.err"
    refused "root, no user" p1 a1 "would run project p1's replicas as root" \
        "'project p1 user U'" "--allow-root-replicas yes"
    # the same through the CLI: exit 2, the message on stderr
    "$KILN" jobs submit training a2 --project p1 --scale-tier basic --region us-central1 \
        --module-name m >"$T/cli.out" 2>&1
    check_eq "kiln jobs submit: exit 2" "$?" 2
    check "kiln jobs submit: says why" grep -q "(FAILED_PRECONDITION) kilnd runs as root" "$T/cli.out"
    stop_kilnd

    # a tokens file: p1 runs as nobody, p3 as root, p2 has no line
    TOKEN=tok-root-test-0123456789abcdef
    printf '%s * editor\nproject p1 user nobody\nproject p3 user root\n' "$TOKEN" >"$T/tokens"
    chmod 600 "$T/tokens"
    # nobody must reach its job dirs under $T (mktemp -d: 700): kilnd checks at start
    chmod 711 "$T"
    export TOKEN
    NO_ROOT_OK=1 start_kilnd "$T/b" --tokens "$T/tokens"
    check "at start: p3's jobs will be refused" grep -q \
        "will refuse every job of project p3: it runs as root ('project p3 user root')" \
        "$T/b/kilnd.err"
    check "at start: the projects without a line" grep -q \
        "will refuse every job of a project other than p1, p3: it runs as root" "$T/b/kilnd.err"
    create p1 b1
    check_eq "p1 (user nobody): accepted" "$STATUS" 200
    api POST /v1/projects/p1/jobs/b1:cancel '{}'
    refused "root, a project without a line" p2 b2 "would run project p2's replicas as root" \
        "'project p2 user U'" "--allow-root-replicas yes"
    refused "root, user root" p3 b3 "runs project p3 as root ('project p3 user root')" \
        "--allow-root-replicas yes"
    stop_kilnd
    unset TOKEN

    # a single-user machine: root replicas allowed, nothing to warn about
    NO_ROOT_OK=1 start_kilnd "$T/c" --allow-root-replicas yes
    check "no warning with --allow-root-replicas yes" \
        bash -c "! grep -q 'will refuse' '$T/c/kilnd.err'"
    create p1 c1
    check_eq "--allow-root-replicas yes: accepted" "$STATUS" 200
    check "and it runs" wait_state c1 SUCCEEDED 20
else
    TOKEN=tok-root-test-0123456789abcdef
    printf '%s * editor\nproject p1 user root\n' "$TOKEN" >"$T/tokens"
    chmod 600 "$T/tokens"
    export TOKEN
    start_kilnd "$T/n" --tokens "$T/tokens"
    check "at start: p1's jobs will be refused" grep -q \
        "will refuse every job of project p1: it runs as user root, and kilnd (uid $(id -u), not root) cannot switch to it" \
        "$T/n/kilnd.err"
    refused "not root, another user" p1 n1 "project p1 runs as user root ('project p1 user root'" \
        "cannot switch to it"
    create p2 n2
    check_eq "not root, no line: accepted (runs as kilnd's user)" "$STATUS" 200
fi
finish

#!/bin/bash
# tests/service/it_users_dirs.sh - kilnd (as root) refuses to start when a
# project's user cannot enter the data dir its job directories are under
# (the issue's mktemp -d, mode 700), naming the directory, the user and the
# fix; let through (o+x), the same kilnd starts and the user's job runs.
# Creates a user with useradd (as root) and removes it at the end.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need runas

U=kilndir$$
useradd -r -M -s /usr/sbin/nologin "$U" || {
    fail "useradd $U"
    finish
}
AT_EXIT="userdel $U >/dev/null 2>&1"
TOKEN=tok-editor-0123456789abcdef
printf '%s * editor\nproject p1 user %s\n' "$TOKEN" "$U" >"$T/tokens"
chmod 600 "$T/tokens"
export TOKEN
# $T is mktemp -d's: mode 700, root's
chmod 700 "$T"
mkdir -p "$T/data"
timeout 20 "$KILND" --listen 127.0.0.1:0 --data-dir "$T/data" --tokens "$T/tokens" 2>"$T/refused.err"
check_eq "kilnd refuses to start" "$?" 1
err=$(cat "$T/refused.err")
check "names the user and the project ($err)" grep -q "project p1's replicas run as user $U" <<<"$err"
check "names the directory it cannot enter" grep -q "who cannot enter $T (mode 0700" <<<"$err"
check "names the fix" grep -q "chmod o+x $T" <<<"$err"
check "no database made" test ! -e "$T/data/kilnd.db"

# a directory deeper down, the same
chmod 711 "$T"
chmod 700 "$T/data"
timeout 20 "$KILND" --listen 127.0.0.1:0 --data-dir "$T/data" --tokens "$T/tokens" 2>"$T/refused.err"
check_eq "kilnd refuses a data dir of mode 700" "$?" 1
check "names the data dir" grep -q "who cannot enter $T/data (mode 0700" "$T/refused.err"

# let through: it starts, and the user's job runs in its job directory
chmod 711 "$T/data"
NO_ROOT_OK=1 start_kilnd "$T/data" --tokens "$T/tokens"
api POST /v1/projects/p1/jobs "$(job_json dirs_1 'echo "IDS $(id -un) $(pwd)"')"
check_eq "job accepted" "$STATUS" 200
check "dirs_1 SUCCEEDED" wait_state dirs_1 SUCCEEDED 20
check "it ran as the user" grep -q "	IDS $U " "$T/data/jobs/p1/dirs_1/log.tsv"
finish

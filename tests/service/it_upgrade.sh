#!/bin/bash
# tests/service/it_upgrade.sh - upgrades keep every job. Data dirs of each
# earlier schema version kilnd wrote (0: before versions were kept, 2: the
# last before notebooks), made from tests/service/upgrade/v*.sql, whose DDL
# is checked here against git history (historic_ddl.py) when there is one,
# are opened by today's kilnd: the store is migrated (user_version 3), the
# copy it kept while migrating is gone once committed, and every job is
# there in its state (SUCCEEDED, FAILED; QUEUED, RUNNING, the study and the
# queued one active) with its spec (the study's hyperparameters, the labels
# the migration indexed: a label filter finds the job), its logs answer,
# and each active one cancels. A migration that fails leaves the store at
# its version with its jobs, and the copy, which kilnd's refusal names.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
UP=$SRC/tests/service/upgrade

sql() { # sql DB QUERY: one value
    "$PY" -c 'import sqlite3,sys; r=sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone(); print("" if r is None else r[0])' "$1" "$2"
}
mkstore() { # mkstore SQLFILE DB
    "$PY" -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[2]); c.executescript(open(sys.argv[1]).read()); c.close()' "$1" "$2"
}
schema_of() { # the store's tables and indexes, as SQLite keeps their SQL
    "$PY" -c '
import sqlite3, sys
for r in sqlite3.connect(sys.argv[1]).execute("select type, name, sql from sqlite_master where name not like \"sqlite_%\" order by name"):
    print(r)' "$1"
}

# ---- the fixtures' schema is the history's ----
if git -C "$SRC" cat-file -e 'b903cb8^:src/store/schema.c' 2>/dev/null &&
    git -C "$SRC" cat-file -e '0d955fd^:src/store/store.c' 2>/dev/null; then
    for v in 0 2; do
        mkstore "$UP/v$v.sql" "$T/fixture$v.db"
        "$PY" "$UP/historic_ddl.py" "$SRC" "$v" >"$T/hist$v.sql"
        mkstore "$T/hist$v.sql" "$T/hist$v.db"
        check_eq "v$v fixture's schema is git history's" "$(schema_of "$T/fixture$v.db")" \
            "$(schema_of "$T/hist$v.db")"
    done
else
    echo "note: no git history here (0d955fd, b903cb8): the fixtures' DDL is not compared with it"
fi

for v in 0 2; do
    D=$T/d$v
    mkdir -p "$D"
    mkstore "$UP/v$v.sql" "$D/kilnd.db"
    check_eq "v$v: fixture's version" "$(sql "$D/kilnd.db" 'pragma user_version')" "$v"
    start_kilnd "$D"
    check_eq "v$v: migrated to 3" "$(sql "$D/kilnd.db" 'pragma user_version')" 3
    check "v$v: the migration's copy is gone once committed" test ! -e "$D/kilnd.db.pre-upgrade-v$v"
    check_eq "v$v: no job lost" "$(sql "$D/kilnd.db" 'select count(*) from jobs')" 6
    check_eq "v$v: SUCCEEDED kept" "$(job_state up_done)" SUCCEEDED
    check_eq "v$v: FAILED kept" "$(job_state up_failed)" FAILED
    for j in up_queued up_running up_study up_inqueue; do
        s=$(job_state $j)
        case $s in QUEUED | PREPARING | RUNNING) ok ;; *) fail "v$v: $j is '$s', not active" ;; esac
    done
    api GET /v1/projects/p1/jobs/up_failed
    check_eq "v$v: FAILED's error kept" "$(jget errorMessage <<<"$BODY")" "exit status 3"
    api GET /v1/projects/p1/jobs/up_study
    check_eq "v$v: the study's hyperparameters kept" \
        "$(jget trainingInput.hyperparameters.maxTrials <<<"$BODY")" 2
    api GET "/v1/projects/p1/jobs?filter=labels.team%3Da"
    check_eq "v$v: a label filter finds the queued job" "$(jget jobs.0.jobId <<<"$BODY")" up_inqueue
    check_eq "v$v: and only it" "$(jget jobs.1.jobId <<<"$BODY")" ""
    api GET "/v1/projects/p1/jobs?filter=labels.kueue.x-k8s.io/queue-name%3Duser-queue"
    check_eq "v$v: its queue label too" "$(jget jobs.0.jobId <<<"$BODY")" up_inqueue
    api GET "/v1/projects/p1/jobs/up_done:logs"
    check_eq "v$v: logs of a job from before answer" "$STATUS" 200
    for j in up_queued up_running up_study up_inqueue; do
        api POST "/v1/projects/p1/jobs/$j:cancel" '{}'
        check_eq "v$v: cancel $j" "$STATUS" 200
        check "v$v: $j CANCELLED" wait_state "$j" CANCELLED 20
    done
    stop_kilnd
done

# ---- a migration that fails keeps the store and the copy ----
D=$T/dfail
mkdir -p "$D"
# a docs table of the wrong shape: migration 2 -> 3's CREATE TABLE docs fails
{ cat "$UP/v2.sql"; echo "CREATE TABLE docs(x);"; } >"$T/v2-bad.sql"
mkstore "$T/v2-bad.sql" "$D/kilnd.db"
"$KILND" --listen 127.0.0.1:0 --data-dir "$D" --allow-root-replicas yes 2>"$T/fail.err" &
fpid=$!
for _ in $(seq 1 100); do kill -0 "$fpid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$fpid" 2>/dev/null; then
    fail "kilnd started on a store whose migration fails"
    kill "$fpid"
fi
wait "$fpid"
check "the refusal says the migration failed" grep -q "cannot initialise the store" "$T/fail.err"
check "and names the copy kept" grep -q "kilnd.db.pre-upgrade-v2" "$T/fail.err"
check_eq "the store is still version 2" "$(sql "$D/kilnd.db" 'pragma user_version')" 2
check_eq "with its jobs" "$(sql "$D/kilnd.db" 'select count(*) from jobs')" 6
check_eq "the copy is version 2" "$(sql "$D/kilnd.db.pre-upgrade-v2" 'pragma user_version')" 2
check_eq "with the jobs" "$(sql "$D/kilnd.db.pre-upgrade-v2" 'select count(*) from jobs')" 6
check_eq "the copy is private" "$(stat -c %a "$D/kilnd.db.pre-upgrade-v2")" 600
finish

#!/bin/bash
# tests/service/it_backup.sh - `kiln admin backup FILE` while kilnd serves
# and jobs are being submitted: each copy passes SQLite's integrity check and
# holds every job whose create was answered before the backup began; the
# copy is one private file (no -wal, mode 0600); restoring it by hand (stop
# kilnd, put it at DATA/kilnd.db, start: docs/install.md) serves exactly its
# jobs. A FILE that exists and a data dir without a store are refused.
#
# `kiln admin restore FILE`: refused, with nothing changed, while kilnd
# serves the data dir, for a file that is not SQLite, a SQLite file that is
# not a kiln store and a store of a newer schema; kilnd refuses to start
# while a restore holds the store. A real restore brings back the backup's
# jobs with their states (and not the later ones), keeps the replaced store
# in DATA/before-restore-*/, and kilnd serves it; an older schema's store
# is restored and upgraded by kilnd; an empty data dir takes one (as root,
# owned by the data dir's owner).
. "$(dirname "$0")/lib.sh"
KILN_BIN=$BUILD/bin/kiln

# count_jobs DB / has_job DB ID: read the copy with Python's sqlite3
count_jobs() { "$PY" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from jobs").fetchone()[0])' "$1"; }
missing_jobs() { # missing_jobs DB IDFILE: the ids of IDFILE not in DB
    "$PY" -c '
import sqlite3, sys
have = {r[0] for r in sqlite3.connect(sys.argv[1]).execute("select job_id from jobs")}
print(" ".join(i for i in open(sys.argv[2]).read().split() if i not in have))' "$1" "$2"
}
user_version() { "$PY" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("pragma user_version").fetchone()[0])' "$1"; }
integrity() { "$PY" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("pragma integrity_check").fetchone()[0])' "$1"; }

start_kilnd "$T/d"
: >"$T/acked"
# the load: creates one after another, each id appended once answered 200
(
    for i in $(seq 1 400); do
        [ -e "$T/stop" ] && break
        code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
            --data-binary "$(job_json "ld_$i" 'exit 0')" "$URL/v1/projects/p1/jobs")
        [ "$code" = 200 ] && echo "ld_$i" >>"$T/acked"
    done
    touch "$T/load.done"
) &
LOADER=$!
# backups under that load, each checked against what was acked before it
for b in 1 2 3 4 5; do
    for _ in $(seq 1 40); do [ "$(wc -l <"$T/acked")" -ge $((b * 20)) ] && break; sleep 0.05; done
    cp "$T/acked" "$T/before.$b"
    check "backup $b under load" "$KILN_BIN" admin backup "$T/b$b.db" --data-dir "$T/d"
    check_eq "backup $b: integrity" "$(integrity "$T/b$b.db")" ok
    check_eq "backup $b: every job acked before it" "$(missing_jobs "$T/b$b.db" "$T/before.$b")" ""
    n=$(count_jobs "$T/b$b.db")
    check "backup $b: $n jobs, at least the $(wc -l <"$T/before.$b") acked before" \
        test "$n" -ge "$(wc -l <"$T/before.$b")"
done
touch "$T/stop"
wait "$LOADER"
check "the load went on during the backups" test "$(wc -l <"$T/acked")" -gt "$(wc -l <"$T/before.1")"
check_eq "backup is private (0600)" "$(stat -c %a "$T/b5.db")" 600
check "backup is one file (no -wal beside it)" test ! -e "$T/b5.db-wal"
check_eq "backup is not in WAL mode" \
    "$("$PY" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("pragma journal_mode").fetchone()[0])' "$T/b5.db")" delete

# refusals
"$KILN_BIN" admin backup "$T/b5.db" --data-dir "$T/d" >"$T/exists.out" 2>&1
check_eq "an existing FILE: exit 1" "$?" 1
check "an existing FILE: says so" grep -q "exists: a backup never replaces a file" "$T/exists.out"
"$KILN_BIN" admin backup "$T/x.db" --data-dir "$T/nothing-here" >"$T/nostore.out" 2>&1
check_eq "no store: exit 1" "$?" 1
check "no store: names it" grep -q "cannot open the store '$T/nothing-here/kilnd.db'" "$T/nostore.out"
check "no store: nothing made" test ! -e "$T/nothing-here/kilnd.db" -a ! -e "$T/x.db"

# restore: stop kilnd, the copy in place of the store, start
n3=$(count_jobs "$T/b3.db")
stop_kilnd
mkdir "$T/d/old" && mv "$T/d"/kilnd.db* "$T/d/old/"
cp "$T/b3.db" "$T/d/kilnd.db"
start_kilnd "$T/d"
listed=$("$PY" - "$URL" <<'PY'
import json, sys, urllib.request
url, n, tok = sys.argv[1], 0, ""
while True:
    q = "?pageSize=100" + ("&pageToken=" + tok if tok else "")
    page = json.load(urllib.request.urlopen(url + "/v1/projects/p1/jobs" + q))
    n += len(page.get("jobs", []))
    tok = page.get("nextPageToken", "")
    if not tok:
        break
print(n)
PY
)
check_eq "restored: kilnd lists the backup's jobs" "$listed" "$n3"
last=$(tail -n 1 "$T/before.3")
api GET "/v1/projects/p1/jobs/$last"
check_eq "restored: a job acked before backup 3 is there" "$STATUS" 200
later=$(tail -n 1 "$T/acked")
if [ "$(missing_jobs "$T/b3.db" <(echo "$later"))" = "$later" ]; then
    api GET "/v1/projects/p1/jobs/$later"
    check_eq "restored: a job made after backup 3 is not" "$STATUS" 404
fi
# ---- kiln admin restore ----
# the data dir as it stands, to show a refusal changed nothing: the store's
# inode, no before-restore dir, no staged copy
dir_state() {
    echo "$(stat -c %i "$T/d/kilnd.db") $(ls -d "$T/d"/before-restore-* 2>/dev/null | wc -l)" \
        "$(ls "$T/d"/kilnd.db.restore* 2>/dev/null | wc -l)"
}
for j in r_ok:'exit 0' r_fail:'exit 3' r_cancel:'sleep 60'; do
    api POST /v1/projects/p1/jobs "$(job_json "${j%%:*}" "${j#*:}")"
    check_eq "restore: create ${j%%:*}" "$STATUS" 200
done
api POST /v1/projects/p1/jobs/r_cancel:cancel '{}'
check_eq "restore: cancel r_cancel" "$STATUS" 200
check "restore: r_ok succeeded" wait_state r_ok SUCCEEDED 120
check "restore: r_fail failed" wait_state r_fail FAILED 120
check "restore: r_cancel cancelled" wait_state r_cancel CANCELLED 60
check "backup r" "$KILN_BIN" admin backup "$T/r.db" --data-dir "$T/d"
api POST /v1/projects/p1/jobs "$(job_json r_after 'exit 0')"
check_eq "restore: create r_after (after the backup)" "$STATUS" 200

before=$(dir_state)
"$KILN_BIN" admin restore "$T/r.db" --data-dir "$T/d" >"$T/running.out" 2>&1
check_eq "restore while kilnd serves: exit 1" "$?" 1
check "restore while kilnd serves: names the data dir, stop kilnd first" \
    grep -q "the data dir '$T/d' is in use.*stop kilnd first" "$T/running.out"
check_eq "restore while kilnd serves: nothing changed" "$(dir_state)" "$before"
api GET /v1/projects/p1/jobs/r_after
check_eq "restore while kilnd serves: kilnd still has r_after" "$STATUS" 200
# a crash, not a stop: the store's -wal stays beside it, for the restore to
# move aside with it (r_after done first: no replica outlives kilnd)
check "restore: r_after succeeded" wait_state r_after SUCCEEDED 120
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
check "a crashed kilnd leaves the store's -wal" test -e "$T/d/kilnd.db-wal"
store_sum() { cat "$1/kilnd.db" "$1/kilnd.db-wal" | sha256sum; }
sum_before=$(store_sum "$T/d")

# refused backups, with kilnd stopped: nothing changes either
refused() { # refused NAME FILE PATTERN
    local before
    before="$(dir_state) $(store_sum "$T/d")"
    "$KILN_BIN" admin restore "$2" --data-dir "$T/d" >"$T/$1.out" 2>&1
    check_eq "restore $1: exit 1" "$?" 1
    check "restore $1: says why" grep -q -- "$3" "$T/$1.out"
    check_eq "restore $1: nothing changed" "$(dir_state) $(store_sum "$T/d")" "$before"
}
head -c 8192 /dev/urandom >"$T/noise.db"
refused "of a non-SQLite file" "$T/noise.db" "'$T/noise.db' is not a SQLite database"
"$PY" -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("create table jobs(a)"); c.commit()' "$T/other.db"
refused "of a SQLite file that is not a kiln store" "$T/other.db" \
    "'$T/other.db' is a SQLite database but not a kiln store"
schema=$(user_version "$T/r.db")
cp "$T/r.db" "$T/newer.db"
"$PY" -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("pragma user_version = %d" % int(sys.argv[2])); c.commit()' "$T/newer.db" $((schema + 1))
check_eq "the newer store's version" "$(user_version "$T/newer.db")" $((schema + 1))
refused "of a newer schema" "$T/newer.db" \
    "'$T/newer.db' has schema version $((schema + 1)), written by a newer kiln; this one knows versions up to $schema"

# kilnd does not start while a restore holds the store (flock(1) stands in)
flock -x -o "$T/d/kilnd.db-lock" "$KILND" --listen 127.0.0.1:0 --data-dir "$T/d" >"$T/held.out" 2>&1
check_eq "kilnd during a restore: exit 1" "$?" 1
check "kilnd during a restore: says so" grep -q "is being restored (kiln admin restore holds" "$T/held.out"
check_eq "kilnd during a restore: the store untouched" "$(store_sum "$T/d")" "$sum_before"

# the restore
check "restore r" "$KILN_BIN" admin restore "$T/r.db" --data-dir "$T/d" >"$T/restore.out"
aside=$(ls -d "$T/d"/before-restore-* 2>/dev/null)
check_eq "restore: one before-restore dir" "$(echo "$aside" | grep -c before-restore-)" 1
check_eq "restore: the old store and its -wal are in it, as they were" "$(store_sum "$aside")" "$sum_before"
check_eq "restore: the old store has r_after" "$(missing_jobs "$aside/kilnd.db" <(echo r_after))" ""
check "restore: no -wal left beside the restored store" test ! -e "$T/d/kilnd.db-wal"
check "restore: no -shm left beside the restored store" test ! -e "$T/d/kilnd.db-shm"
check "restore: says where the old store went and how to undo" \
    grep -q "kiln admin restore $aside/kilnd.db --data-dir $T/d" "$T/restore.out"
check_eq "restore: the store is the backup's jobs" "$(count_jobs "$T/d/kilnd.db")" "$(count_jobs "$T/r.db")"
check_eq "restore: FILE untouched" "$(integrity "$T/r.db")" ok
start_kilnd "$T/d"
check_eq "restored: r_ok SUCCEEDED" "$(job_state r_ok)" SUCCEEDED
check_eq "restored: r_fail FAILED" "$(job_state r_fail)" FAILED
check_eq "restored: r_cancel CANCELLED" "$(job_state r_cancel)" CANCELLED
api GET /v1/projects/p1/jobs/r_after
check_eq "restored: r_after (made after the backup) is gone" "$STATUS" 404
api POST /v1/projects/p1/jobs "$(job_json r_new 'exit 0')"
check_eq "restored: kilnd takes new jobs" "$STATUS" 200

# a store of an older schema: restored, upgraded by kilnd at start. Version
# 2 is version 3 less its docs table (src/store/schema.c, migration 2 -> 3)
stop_kilnd
cp "$T/r.db" "$T/older.db"
"$PY" -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("drop table docs"); c.execute("pragma user_version = 2"); c.commit()' "$T/older.db"
check "restore an older schema" "$KILN_BIN" admin restore "$T/older.db" --data-dir "$T/d" >"$T/older.out"
check "restore an older schema: names both versions" \
    grep -q "schema version 2 is older than this kiln's $schema" "$T/older.out"
check_eq "restore an older schema: a second before-restore dir" "$(ls -d "$T/d"/before-restore-* | wc -l)" 2
start_kilnd "$T/d"
check_eq "restored older: r_ok SUCCEEDED" "$(job_state r_ok)" SUCCEEDED
check_eq "restored older: upgraded to $schema" "$(user_version "$T/d/kilnd.db")" "$schema"
# an empty data dir: the backup goes in, nothing is moved; as root, the
# store (0600) and its lock file go to the data dir's owner, whom kilnd runs as
mkdir "$T/e"
check "restore into an empty data dir" "$KILN_BIN" admin restore "$T/r.db" --data-dir "$T/e" >"$T/empty.out"
check "restore into an empty data dir: says so" grep -q "there was no store to replace" "$T/empty.out"
check "restore into an empty data dir: no before-restore dir" test -z "$(ls -d "$T/e"/before-restore-* 2>/dev/null)"
check_eq "restore into an empty data dir: the backup's jobs" "$(count_jobs "$T/e/kilnd.db")" "$(count_jobs "$T/r.db")"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir "$T/o" && chown nobody "$T/o"
    check "restore as root" "$KILN_BIN" admin restore "$T/r.db" --data-dir "$T/o" >/dev/null
    check_eq "restore as root: the store is the data dir owner's" "$(stat -c %U "$T/o/kilnd.db")" nobody
    check_eq "restore as root: so is the lock file" "$(stat -c %U "$T/o/kilnd.db-lock")" nobody
fi
finish

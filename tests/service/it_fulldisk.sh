#!/bin/bash
# tests/service/it_fulldisk.sh - kilnd on a full disk: a small tmpfs is the
# data dir; once it is full, creates answer 503 with the reason, what was
# acknowledged is still there, reads keep working, and kilnd takes creates
# again by itself when space returns. A job already running when the disk
# fills keeps running while its replica writes (kiln-monitor drains and
# counts what it cannot log), SUCCEEDS after space returns, and its log marks
# the gap: "[kiln] N bytes of output lost: disk full"; a metrics report the
# full disk cut short does not spoil the first one after it. Needs a mount
# (probe tmpfs).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need tmpfs

D=$T/full
mkdir -p "$D"
mount -t tmpfs -o size=16m tmpfs "$D" || exit 1
unmount() {
    for p in "${KPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${KPIDS[@]}"; do wait "$p" 2>/dev/null; done
    # finish() reads kilnd.err: keep a copy outside the mount
    mkdir -p "$T/log" && cp "$D/kilnd.err" "$T/log/" 2>/dev/null
    umount "$D" 2>/dev/null
}
trap 'unmount; cleanup' EXIT
start_kilnd "$D" --min-free-bytes 4194304

api POST /v1/projects/p1/jobs "$(job_json before_1 'echo hi')"
check_eq "create with room" "$STATUS" 200
check "job done" wait_state before_1 SUCCEEDED 20

# a replica that writes all the time, until told to finish (the flag lives
# outside the full file system)
GO=$T/writer.go
rm -f "$GO"
# reports (training metrics lines, 200+ bytes each) as it goes, and one
# last report as soon as it is told to finish
api POST /v1/projects/p1/jobs "$(job_json writer_1 "i=0; while [ ! -e $GO ]; do i=\$((i+1)); printf '{\"event\":\"metrics\",\"step\":%s,\"pad\":\"%0200d\"}\\n' \$i 0; sleep 0.02; done; echo '{\"event\":\"metrics\",\"step\":777777}'; echo writer finished")"
check_eq "create the writer" "$STATUS" 200
check "writer running" wait_state writer_1 RUNNING 20
WLOG=""
for _ in $(seq 1 100); do
    WLOG=$(find "$D/jobs" -path '*writer_1*' -name log.tsv 2>/dev/null | head -1)
    [ -n "$WLOG" ] && grep -q '"step":5,' "$WLOG" && break
    sleep 0.05
done
check "the writer's log has its first lines" grep -q '"step":5,' "$WLOG"

# fill the file system to the last block
dd if=/dev/zero of="$D/filler" bs=1M 2>/dev/null
sleep 1 # the writer writes ~50 lines of 200+ bytes: more than the logs' last pages hold
api POST /v1/projects/p1/jobs "$(job_json full_1 'echo hi')"
check_eq "create on a full disk -> 503" "$STATUS" 503
check_eq "503 status word" "$(printf '%s' "$BODY" | jget error.status)" UNAVAILABLE
case $BODY in *"file system is full"*) ok ;; *) fail "503 says why: $BODY" ;; esac
api GET /v1/projects/p1/jobs/before_1
check_eq "acknowledged job still there" "$STATUS" 200
check_eq "and still SUCCEEDED" "$(printf '%s' "$BODY" | jget state)" SUCCEEDED
api GET /v1/projects/p1/jobs/full_1
check_eq "the refused job does not exist" "$STATUS" 404
check "kilnd alive on a full disk" kill -0 "$KPID"
check_eq "the writer still runs on a full disk" "$(job_state writer_1)" RUNNING

# space returns: creates work again with no restart
rm -f "$D/filler"
touch "$GO" # its next report is the first thing written once space returned
check "the writer SUCCEEDS after space returns" wait_state writer_1 SUCCEEDED 20
# a report the full disk cut short did not spoil the one after it
api GET /v1/projects/p1/jobs/writer_1:metrics
check_eq "the last report after space returned is whole" \
    "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["points"][-1]["step"])')" 777777
check "its log marks the lost output" grep -qE "\[kiln\] [0-9]+ bytes of output lost: disk full" "$WLOG"
check "and goes on after the gap" grep -q "writer finished" "$WLOG"
LOST=$(sed -n 's/.*\[kiln\] \([0-9]*\) bytes of output lost.*/\1/p' "$WLOG" | head -1)
check "the marker counts the lines lost (${LOST:-?} bytes > 2000)" test "${LOST:-0}" -gt 2000
# the marker comes before the lines written once space returned
check "marker before the later lines" awk '/bytes of output lost/ {m = NR} /writer finished/ {f = NR} END {exit !(m && f > m)}' "$WLOG"
api POST /v1/projects/p1/jobs "$(job_json after_1 'echo hi')"
check_eq "create once space returns" "$STATUS" 200
check "that job runs" wait_state after_1 SUCCEEDED 20

stop_kilnd
unmount
finish

#!/bin/bash
# tests/service/it_fulldisk.sh - kilnd on a full disk: a small tmpfs is the
# data dir; once it is full, creates answer 503 with the reason, what was
# acknowledged is still there, reads keep working, and kilnd takes creates
# again by itself when space returns. Needs a mount (probe tmpfs).
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

# fill the file system to the last block
dd if=/dev/zero of="$D/filler" bs=1M 2>/dev/null
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

# space returns: creates work again with no restart
rm -f "$D/filler"
api POST /v1/projects/p1/jobs "$(job_json after_1 'echo hi')"
check_eq "create once space returns" "$STATUS" 200
check "that job runs" wait_state after_1 SUCCEEDED 20

stop_kilnd
unmount
finish

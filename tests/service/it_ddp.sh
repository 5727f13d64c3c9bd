#!/bin/bash
# tests/service/it_ddp.sh - an unmodified PyTorch DDP script (gloo) runs as a
# kiln job with a master and two workers: the replicas find each other
# through MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE and all-reduce.
# Skipped (77) where Debian's python3-torch is not installed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need torch
SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
start_kilnd "$T/d" --python "$SYSPY"
"$KILN" jobs submit training ddp_1 --package-path "$(dirname "$0")/ddp" --module-name ddp.train \
    --scale-tier custom --master-machine-type n1-standard-4 --worker-count 2 \
    --worker-machine-type n1-standard-4 --region us-central1 >/dev/null 2>&1
check_eq "submitted" "$?" 0
check "DDP job SUCCEEDED" wait_state ddp_1 SUCCEEDED 120
"$KILN" jobs stream-logs ddp_1 >"$T/logs"
for r in 0 1 2; do
    check "rank $r in sync" grep -q "rank $r of 3 in sync: True" "$T/logs"
done
# the same with no kilnd: kiln local train --distributed
KILN_PYTHON=$SYSPY timeout 120 "$KILN" local train --distributed --worker-count 1 \
    --parameter-server-count 0 --package-path "$(dirname "$0")/ddp" --module-name ddp.train \
    >"$T/local" 2>&1
check_eq "local train --distributed exit" "$?" 0
check "local: rank 1 of 2 in sync" grep -q "rank 1 of 2 in sync: True" "$T/local"
finish

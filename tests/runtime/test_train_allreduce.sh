#!/bin/sh
# kiln-train allreduce-bench: the subcommand is wired to the collectives'
# benchmark, forks the ranks, checks the result and prints nccl-tests' figures.
KT=$1
pass=0 fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }

out=$("$KT" allreduce-bench --world_size=2 --min_bytes=4096 --max_bytes=65536 --iters=5 --check 2>&1)
rc=$?
ok "exits 0" '[ $rc = 0 ]'
ok "one JSON line per size (4 KiB .. 64 KiB)" '[ "$(echo "$out" | grep -c "^{\"bytes\":")" = 5 ]'
ok "busbw reported and positive" 'echo "$out" | grep -q "\"busbw_gbps\":[0-9]*\.[0-9]*[1-9]"'
"$KT" allreduce-bench --world_size=0 > /dev/null 2>&1
rc=$?
ok "world_size 0 is refused" '[ $rc != 0 ]'
echo "$pass passed, $fail failed"
[ $fail = 0 ]

#!/bin/bash
# tests/service/it_gpu_check_tool.sh - kiln-gpu-check, the check kilnd
# --gpu-check runs: with a GPU (the gpu probe) it passes on GPU 0 and prints
# its RESULT line; without one it says why in one line and exits 2 (CUDA
# unusable), never 0, so a kilnd using it keeps such a GPU out of service.
# Its usage errors exit 2 too.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"

TOOL=$BUILD/bin/kiln-gpu-check
"$TOOL" a b >"$T/u.out" 2>&1
check_eq "two arguments: usage, exit 2" "$?" 2
check "the usage" grep -q "usage: kiln-gpu-check" "$T/u.out"
if kiln_probe gpu; then
    U=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
    CUDA_VISIBLE_DEVICES=$U timeout 120 "$TOOL" "$U" >"$T/out" 2>&1
    check_eq "passes on GPU 0 ($(tail -1 "$T/out"))" "$?" 0
    check "its RESULT line" grep -q "^RESULT gpu_check uuid=$U .* ok=1" "$T/out"
else
    echo "no GPU here ($KILN_PROBE_WHY): the tool must fail, saying why"
    CUDA_VISIBLE_DEVICES=GPU-none timeout 60 "$TOOL" GPU-none >"$T/out" 2>&1
    check_eq "no GPU: exit 2" "$?" 2
    check "a reason" test -n "$(tail -1 "$T/out")"
    check "no RESULT claiming a pass" test -z "$(grep 'ok=1' "$T/out")"
fi
finish

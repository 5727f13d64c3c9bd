#!/bin/bash
# tests/service/it_gpu_before_work.sh - the GPU check before work (kilnd
# --gpu-check) with the stand-in NVML (two H100s), a stand-in check program
# that fails on the GPUs a file names, and a stand-in dcgmi. Checks that
#   - at start every idle GPU is checked by its UUID (CUDA_VISIBLE_DEVICES),
#     dcgmi diag -r 1 follows a pass; the GPU that fails stays out of
#     service with the program's words, the other takes work;
#   - on the schedule (--gpu-check-every 1) a GPU holding a replica is never
#     checked, and is checked again once idle;
#   - kiln nodes uncordon --gpu on a held GPU is refused (409); on the failed
#     one it runs the check, and the GPU comes back only when it passes;
#   - --gpu-check-every without --gpu-check, and --gpu-check with
#     --node-config, are refused at start.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_lib.sh"

printf '0.name=NVIDIA H100 80GB HBM3\n0.uuid=%s\n1.name=NVIDIA H100 80GB HBM3\n1.uuid=%s\n' "$U0" "$U1" >"$T/state"
echo "$U1" >"$T/bad"
cat >"$T/check" <<EOF
#!/bin/sh
echo "\$1 CVD=\$CUDA_VISIBLE_DEVICES idx=\$KILN_GPU_CHECK_INDEX" >>"$T/checks.log"
sleep 0.2
if grep -qx "\$CUDA_VISIBLE_DEVICES" "$T/bad"; then
    echo "gemm 512x512: max error 3.5e+01 against the CPU reference (allowed 1e-03)"
    exit 1
fi
echo "gemm ok, memory pattern ok"
EOF
cat >"$T/dcgmi" <<EOF
#!/bin/sh
echo "\$*" >>"$T/dcgmi.log"
echo "Diagnostic: Pass"
EOF
chmod +x "$T/check" "$T/dcgmi"
export KILN_GPU_CHECK_DCGMI=$T/dcgmi

# ---- flags refused at start ----
"$BUILD/bin/kilnd" --data-dir "$T/x" --nvml-library "$LIB" --gpu-check-every 5 >"$T/x.out" 2>&1
check_eq "--gpu-check-every alone: refused" "$?" 1
check "naming the flag" grep -q "\-\-gpu-check-every and --gpu-check-timeout need --gpu-check" "$T/x.out"
echo '{"nodes":[{"name":"n","accelerators":[{"type":"NVIDIA_L4","count":1}]}]}' >"$T/nodes.json"
"$BUILD/bin/kilnd" --data-dir "$T/x" --node-config "$T/nodes.json" --gpu-check "$T/check" >"$T/x.out" 2>&1
check_eq "--gpu-check with --node-config: refused" "$?" 1
check "saying why" grep -q "\-\-gpu-check checks this machine's GPUs" "$T/x.out"

start_kilnd "$T/d" --nvml-library "$LIB" --gpu-check "$T/check" --gpu-check-every 1
dev() { printf '%s' "$BODY" | jget "devices.$1.$2"; }
for _ in $(seq 1 100); do
    api GET "/v1/nodes/$NODE"
    [ "$(dev 0 health)" = OK ] && [ "$(dev 1 health)" = FAILED ] && break
    sleep 0.1
done
check_eq "GPU 0 passed its check" "$(dev 0 health)" OK
check "its result" grep -q "^passed ($T/check, dcgmi diag -r 1): Diagnostic: Pass" <<<"$(dev 0 gpuCheck)"
check "and how long it took" test "$(dev 0 gpuCheckMs)" -ge 200
check_eq "GPU 1 failed its check: out of service" "$(dev 1 health)" FAILED
check "with the program's words" grep -q "GPU check failed: $T/check exited 1: gemm 512x512: max error" <<<"$(dev 1 reason)"
check "each checked by its UUID" grep -q "^$U1 CVD=$U1 idx=1" "$T/checks.log"
check "dcgmi diag -r 1 after a pass only" test "$(sort -u "$T/dcgmi.log")" = "diag -r 1 -i 0"
curl -s -m 10 "$URL/metrics" >"$T/metrics"
check "/metrics: GPU 1 out of service, the check's reason" grep -q "^kiln_gpu_in_service{gpu=\"1\",.*reason=\"GPU check failed: " "$T/metrics"

# a and b hold their GPUs until cancelled: a fixed sleep ended a first under
# a loaded ASan run, and b then took a's GPU
api POST /v1/projects/p1/jobs "$(gjob a 1 NVIDIA_H100_80GB 'while :; do sleep 0.2; done')"
check "a runs" wait_state a RUNNING 10
api GET /v1/projects/p1/jobs/a
check_eq "on the GPU that passed" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)" "$U0"
api POST /v1/projects/p1/jobs "$(gjob b 1 NVIDIA_H100_80GB 'echo CVD=$CUDA_VISIBLE_DEVICES; while :; do sleep 0.2; done')"
sleep 0.5
check_eq "b waits: the failed GPU is not handed out" "$(job_state b)" QUEUED
n0=$(grep -c "^$U0 " "$T/checks.log")
sleep 2.5
check_eq "never checked while a replica holds it (schedule every 1 s)" "$(grep -c "^$U0 " "$T/checks.log")" "$n0"
api POST "/v1/nodes/$NODE/gpus/0:uncordon" '{}'
check_eq "uncordon of a held GPU with checks: refused" "$STATUS" 409
check "saying why" grep -q "still held by a replica" <<<"$BODY"

# uncordon the failed one: the check runs again, and it still fails (the
# wait: until that check has started, counted in checks.log, and ended, the
# GPU FAILED again rather than CHECKING)
n1=$(grep -c "^$U1 " "$T/checks.log")
"$KILN" nodes uncordon "$NODE" --gpu 1 >/dev/null 2>"$T/unc.err"
check "uncordon says a check runs" grep -q "GPU 1 of node \[$NODE\]: a GPU check runs" "$T/unc.err"
for _ in $(seq 1 100); do
    api GET "/v1/nodes/$NODE"
    [ "$(grep -c "^$U1 " "$T/checks.log")" -gt "$n1" ] && [ "$(dev 1 health)" = FAILED ] && break
    sleep 0.1
done
check "the uncordon's check ran" test "$(grep -c "^$U1 " "$T/checks.log")" -gt "$n1"
check_eq "still failing: still out" "$(dev 1 health)" FAILED
n1=$(grep -c "^$U1 " "$T/checks.log")
check_eq "b still waits" "$(job_state b)" QUEUED
# fixed: the next uncordon's check passes and b gets the GPU
: >"$T/bad"
"$KILN" nodes uncordon "$NODE" --gpu 1 >/dev/null 2>"$T/unc.err"
check "b runs once GPU 1 passed" wait_state b RUNNING 10
api GET /v1/projects/p1/jobs/b
check_eq "b on GPU 1" "$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.gpuUuids.0)" "$U1"
check "uncordon's check ran" test "$(grep -c "^$U1 " "$T/checks.log")" -gt "$n1"
# idle again: the schedule checks it again
api POST /v1/projects/p1/jobs/a:cancel '{}'
check "a cancelled" wait_state a CANCELLED 20
for _ in $(seq 1 100); do
    [ "$(grep -c "^$U0 " "$T/checks.log")" -gt "$n0" ] && break
    sleep 0.1
done
check "idle again, GPU 0 is checked on the schedule" test "$(grep -c "^$U0 " "$T/checks.log")" -gt "$n0"
api POST /v1/projects/p1/jobs/b:cancel '{}'
check "b cancelled" wait_state b CANCELLED 10
finish

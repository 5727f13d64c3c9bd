#!/bin/bash
# tests/service/it_gpu_share.sh - enforced GPU shares (kilnd --gpu-share)
# with the stand-in NVML (two H100s) and a stand-in nvidia-cuda-mps-control
# that logs how it was started. Checks that
#   - GPU 1 shared 4 ways is refused whole and listed as 4 share devices;
#     its MPS control daemon is started with the GPU's UUID and kiln's pipe
#     and log directories, and told quit when kilnd stops;
#   - two one-share jobs run on it at once, each with CUDA_VISIBLE_DEVICES
#     the GPU's UUID, the daemon's pipe directory, a memory cap of a quarter
#     of the GPU's memory and 25% of its SMs; a count without a model gets
#     the whole GPU 0, never a share; two shares for one replica are refused;
#   - /metrics names both holders in the GPU's hpc_job and lists each share;
#   - an Xid on the GPU takes its shares out;
#   - bad --gpu-share values and --gpu-share with --node-config are refused.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_lib.sh"

printf '0.name=NVIDIA H100 80GB HBM3\n0.uuid=%s\n1.name=NVIDIA H100 80GB HBM3\n1.uuid=%s\n1.util=40\n' "$U0" "$U1" >"$T/state"
cat >"$T/mps" <<EOF
#!/bin/sh
if [ \$# -gt 0 ]; then
    echo "\$* CVD=\$CUDA_VISIBLE_DEVICES PIPE=\$CUDA_MPS_PIPE_DIRECTORY LOG=\$CUDA_MPS_LOG_DIRECTORY" >>"$T/mps.log"
else
    echo "stdin: \$(cat) CVD=\$CUDA_VISIBLE_DEVICES" >>"$T/mps.log"
fi
EOF
chmod +x "$T/mps"
export KILN_MPS_CONTROL=$T/mps

# ---- refused at start ----
for bad in 5=4 1=1 1 x=2; do
    "$BUILD/bin/kilnd" --data-dir "$T/x" --nvml-library "$LIB" --gpu-share "$bad" >"$T/x.out" 2>&1
    check_eq "--gpu-share $bad: refused" "$?" 1
    check "naming it ($(tail -1 "$T/x.out"))" grep -q "\-\-gpu-share" "$T/x.out"
done
echo '{"nodes":[{"name":"n","accelerators":[{"type":"NVIDIA_L4","count":1}]}]}' >"$T/nodes.json"
"$BUILD/bin/kilnd" --data-dir "$T/x" --node-config "$T/nodes.json" --gpu-share 0=2 >"$T/x.out" 2>&1
check_eq "--gpu-share with --node-config: refused" "$?" 1

start_kilnd "$T/d" --nvml-library "$LIB" --gpu-share 1=4
api GET "/v1/nodes/$NODE"
N=$BODY
check_eq "GPU 1 refused whole" "$(j devices.1.health)" REFUSED
check "shared through MPS" grep -q "shared through MPS: 4 shares are handed out instead (devices 2 to 5)" <<<"$(j devices.1.reason)"
check_eq "4 shares" "$(j capacity.NVIDIA_H100_80GB_SHARE)" 4
check_eq "share 1 of 4 of GPU 1" "$(j devices.2.type) $(j devices.2.share) $(j devices.2.shares) $(j devices.2.parentUuid)" "NVIDIA_H100_80GB_SHARE 1 4 $U1"
check_eq "its SM part" "$(j devices.5.activeThreadPercentage)" 25
check "the MPS daemon started on GPU 1" grep -q "^-d CVD=$U1 PIPE=$T/d/mps/1/pipe LOG=$T/d/mps/1/log" "$T/mps.log"
check "its directories made" test -d "$T/d/mps/1/pipe" -a -d "$T/d/mps/1/log"

ENVCMD='echo "CVD=$CUDA_VISIBLE_DEVICES MEM=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT SM=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE PIPE=$CUDA_MPS_PIPE_DIRECTORY"; sleep 30'
api POST /v1/projects/p1/jobs "$(gjob s1 1 NVIDIA_H100_80GB_SHARE "$ENVCMD" OnFailure)"
check_eq "s1 accepted" "$STATUS" 200
api POST /v1/projects/p1/jobs "$(gjob s2 1 NVIDIA_H100_80GB_SHARE "$ENVCMD" OnFailure)"
check "s1 runs" wait_state s1 RUNNING 10
check "s2 runs beside it" wait_state s2 RUNNING 10
# 81559 MiB / 4 = 20389 MiB
for x in s1 s2; do
    check "$x: the GPU by UUID, a quarter of its memory and SMs, the daemon's pipe" \
        wait_file "$T/d/jobs/p1/$x/log.tsv" "CVD=$U1 MEM=0=20389M SM=25 PIPE=$T/d/mps/1/pipe\$"
done
api POST /v1/projects/p1/jobs "$(gjob whole 1 "" 'echo CVD=$CUDA_VISIBLE_DEVICES MPS=${CUDA_MPS_PIPE_DIRECTORY:-none}; sleep 30' OnFailure)"
check "a count without a model runs" wait_state whole RUNNING 10
check "on GPU 0 whole, without MPS" wait_file "$T/d/jobs/p1/whole/log.tsv" "CVD=$U0 MPS=none\$"
api POST /v1/projects/p1/jobs "$(gjob two 2 NVIDIA_H100_80GB_SHARE 'true' OnFailure)"
st=$STATUS
sleep 0.5
api GET /v1/projects/p1/jobs/two
check "two shares for one replica: refused ($st)" grep -q "a replica holds one GPU share" <<<"$BODY"

sleep 1.2
curl -s -m 10 "$URL/metrics" >"$T/metrics"
check "GPU 1's series names both holders" grep -q "^DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"$U1\",.*hpc_job=\"p1/s[12],p1/s[12]\"} 40" "$T/metrics"
check "each share in service" test "$(grep -c "^kiln_gpu_in_service{gpu=\"1\",.*kiln_share=\"[1-4]/4\".*} 1" "$T/metrics")" = 4

echo "xid=1:79" | add_state
wait_device 5 FAILED
check_eq "an Xid on GPU 1 takes its shares out" "$(j devices.2.health) $(j devices.5.health)" "FAILED FAILED"
check "naming the GPU" grep -q "its GPU ($U1) is out of service: Xid 79" <<<"$(j devices.3.reason)"
check_eq "GPU 0 untouched" "$(j devices.0.health)" OK
for x in s1 s2 whole two; do api POST "/v1/projects/p1/jobs/$x:cancel" '{}'; done
check "whole cancelled" wait_state whole CANCELLED 10
check "s1 cancelled" wait_state s1 CANCELLED 10
api POST "/v1/nodes/$NODE/gpus/2:uncordon" '{}'
check_eq "uncordon of a share: refused" "$STATUS" 409
check "pointing at its GPU" grep -q "a share of GPU 1" <<<"$BODY"
api POST "/v1/nodes/$NODE/gpus/1:uncordon" '{}'
check_eq "uncordon of the shared GPU" "$STATUS" 200
wait_device 5 OK 50
check_eq "its shares back" "$(j devices.2.health) $(j devices.5.health)" "OK OK"
kill -TERM "$KPID"
wait "$KPID" 2>/dev/null
check "kilnd told the MPS daemon to quit" grep -q "^stdin: quit CVD=$U1" "$T/mps.log"

# ---- with a GPU check: the shared GPU is checked whole, never a share ----
cat >"$T/check" <<EOF
#!/bin/sh
echo "CVD=\$CUDA_VISIBLE_DEVICES" >>"$T/checks.log"
EOF
chmod +x "$T/check"
printf '0.name=NVIDIA H100 80GB HBM3\n0.uuid=%s\n1.name=NVIDIA H100 80GB HBM3\n1.uuid=%s\n' "$U0" "$U1" >"$T/state"
start_kilnd "$T/d2" --nvml-library "$LIB" --gpu-share 1=2 --gpu-check "$T/check"
for _ in $(seq 1 50); do
    [ "$(sort -u "$T/checks.log" 2>/dev/null | wc -l)" -ge 2 ] && break
    sleep 0.1
done
check_eq "both GPUs checked by their own UUIDs, no share" "$(sort -u "$T/checks.log" | tr '\n' ' ')" "CVD=$U0 CVD=$U1 "
wait_device 3 OK 50
check_eq "the shares in service after their GPU passed" "$(j devices.2.health) $(j devices.3.health)" "OK OK"
finish

#!/bin/bash
# tests/service/it_gpu_check.sh - scripts/gpu/kilnd-gpu-check end to end on
# a machine without a GPU: the same script the lent GPU machine runs, with
# the stand-in NVML (two H100s) in place of the driver's and a stand-in
# python3 in place of PyTorch that prints what the real replica prints and
# keeps its GPU busy in the stand-in for a few seconds. On the real machine
# only the driver and PyTorch differ. Asserts: the job SUCCEEDED on the type
# kilnd discovered, its replica saw its GPU's UUID as CUDA_VISIBLE_DEVICES,
# /metrics showed that GPU's utilisation under the job's hpc_job label, the
# RESULT line says so, the script exits 0 within two minutes and leaves no
# process or directory behind.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

mkdir -p "$T/pack/bin" "$T/py"
for b in kilnd kiln kiln-monitor kiln-nvml-facts; do ln -s "$BUILD/bin/$b" "$T/pack/bin/$b"; done
cat >"$T/state" <<'EOF'
0.name=NVIDIA H100 80GB HBM3
0.uuid=GPU-0b8f1ad2-4c9e-4bb1-9d2e-000000000000
1.name=NVIDIA H100 80GB HBM3
1.uuid=GPU-7c1e2f33-5d0a-4cc2-8e3f-111111111111
EOF
# the replica's python3: finds its GPU by the UUID kilnd gave it, and sets
# that GPU's utilisation in the stand-in while it "works"
cat >"$T/py/python3" <<EOF
#!/bin/sh
st=$T/state
echo "CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES"
i=\$(grep "uuid=\$CUDA_VISIBLE_DEVICES\\\$" "\$st" | cut -d. -f1)
[ -n "\$i" ] || { echo "no GPU \$CUDA_VISIBLE_DEVICES in the stand-in" >&2; exit 3; }
echo "torch.cuda.get_device_name(): \$(sed -n "s/^\$i\\.name=//p" "\$st")"
set_util() { { grep -v "^\$i\\.util=" "\$st"; echo "\$i.util=\$1"; } >"\$st.py" && mv "\$st.py" "\$st"; }
set_util 93
sleep 5
set_util 0
echo "100 matmuls of 8192^2 in 5.0 s"
EOF
chmod +x "$T/py/python3"

start=$(date +%s)
KILN_GPU_CHECK_NVML=$BUILD/lib/libkiln-fake-nvml.so KILN_FAKE_NVML_STATE=$T/state \
    KILN_GPU_CHECK_PYTHON=$T/py/python3 timeout 150 bash "$SRC/scripts/gpu/kilnd-gpu-check" \
    "$T/pack" >"$T/out" 2>&1
rc=$?
took=$(($(date +%s) - start))
check_eq "kilnd-gpu-check exit status (log: $T/out)" "$rc" 0
check "under two minutes ($took s)" test "$took" -lt 120
check_eq "RESULT line" "$(tail -1 "$T/out")" \
    "RESULT kilnd_gpu_job=SUCCEEDED gpu_type=NVIDIA_H100_80GB dcgm_util_max=93"
check "NVML facts through kiln's table" grep -q 'nvmlDeviceGetName .*Success: "NVIDIA H100 80GB HBM3" -> kiln type NVIDIA_H100_80GB' "$T/out"
check "Xid registration reported" grep -q 'nvmlDeviceRegisterEvents(XidCriticalError): Success' "$T/out"
check "discovered type printed" grep -q '^discovered GPU type: NVIDIA_H100_80GB$' "$T/out"
check "the replica named its GPU" grep -q 'torch.cuda.get_device_name(): NVIDIA H100 80GB HBM3' "$T/out"
check "CUDA_VISIBLE_DEVICES is the GPU's UUID" grep -qE 'CUDA_VISIBLE_DEVICES=GPU-(0b8f1ad2-4c9e-4bb1-9d2e-000000000000|7c1e2f33-5d0a-4cc2-8e3f-111111111111)$' "$T/out"
check "trainingOutput has GPU-hours" grep -q '"gpuHours"' "$T/out"
check "gpuType in the job" grep -q '"gpuType": "NVIDIA_H100_80GB"' "$T/out"
check "no data dir left" test -z "$(ls -d /tmp/kilnd-gpu-check.* 2>/dev/null | while read -r d; do [ -d "$d/d" ] && echo "$d"; done)"
check "no sanitizer report from its kilnd (a sanitized build)" \
    test -z "$(grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$T/out")"
check "no kilnd of the check left" test -z "$(pgrep -f "kilnd --listen 127.0.0.1:0 --data-dir /tmp/kilnd-gpu-check" || true)"
[ "$FAILS" -eq 0 ] || sed 's/^/  | /' "$T/out" >&2
finish

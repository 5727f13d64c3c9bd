#!/bin/sh
# tests/cuda/test_devices.sh KILN_TRAIN CUDA_BUILT(0|1)
# `kiln-train devices`: the JSON shape, cuda_built matching the build, the
# CPU always listed, and a stated reason whenever no GPU is listed; text
# format and --device checks; bad flags exit 2.
set -u
KT=$1
BUILT=$2
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

"$KT" devices --format=json >"$tmp/out.json" 2>"$tmp/err" || {
    echo "devices --format=json failed: $(cat "$tmp/err")"
    exit 1
}
cat "$tmp/out.json"
# pyenv's python3 or the system one: only the json module is needed
python3 - "$tmp/out.json" "$BUILT" <<'PY' || fail=1
import json, sys
doc = json.load(open(sys.argv[1]))
built = sys.argv[2] == "1"
errs = []
def need(cond, msg):
    if not cond:
        errs.append(msg)
need(doc.get("cuda_built") is built, "cuda_built is %r, build says %r" % (doc.get("cuda_built"), built))
rt = doc.get("cuda_runtime")
need((isinstance(rt, str) and rt.count(".") == 1) if built else rt is None, "cuda_runtime %r" % (rt,))
need("cuda_driver" in doc and "cuda_visible_devices" in doc, "driver / visible devices keys missing")
cpu = doc.get("cpu", {})
need(cpu.get("name") == "/cpu:0", "cpu.name %r" % cpu.get("name"))
need(isinstance(cpu.get("cores"), int) and cpu["cores"] >= 1, "cpu.cores %r" % cpu.get("cores"))
need(isinstance(cpu.get("memory_bytes"), int) and cpu["memory_bytes"] > 0, "cpu.memory_bytes")
devs = doc.get("devices")
need(isinstance(devs, list), "devices is not a list")
if isinstance(devs, list):
    if not built:
        need(devs == [], "devices listed without the backend")
    if not devs:
        need(isinstance(doc.get("gpu_error"), str) and doc["gpu_error"], "no GPU and no gpu_error")
    for i, d in enumerate(devs):
        need(d.get("name") == "/gpu:%d" % i and d.get("index") == i, "device %d name/index" % i)
        for k, t in (("device_name", str), ("memory_bytes", int), ("multiprocessors", int),
                     ("compute_capability", str), ("pci_bus_id", str)):
            need(isinstance(d.get(k), t), "device %d: %s" % (i, k))
for e in errs:
    print("FAIL:", e)
sys.exit(1 if errs else 0)
PY

"$KT" devices >"$tmp/out.txt" || { echo "devices (text) failed"; fail=1; }
grep -q '^/cpu:0 ' "$tmp/out.txt" || { echo "text output lacks /cpu:0"; fail=1; }
if [ "$BUILT" = 1 ]; then want="CUDA backend: built"; else want="CUDA backend: not built"; fi
grep -q "^$want" "$tmp/out.txt" || { echo "text output lacks '$want'"; fail=1; }

"$KT" devices --device=/cpu:0 >/dev/null || { echo "--device=/cpu:0 failed"; fail=1; }
"$KT" devices --device=/gpu:1023 >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || { echo "--device=/gpu:1023 exit $rc, want 1"; fail=1; }
grep -q "does not exist" "$tmp/err" || { echo "no 'does not exist' message"; fail=1; }
"$KT" devices --device=/gpu:x >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] || { echo "--device=/gpu:x exit $rc, want 2"; fail=1; }
"$KT" devices --format=yaml >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || { echo "--format=yaml exit $rc, want 2"; fail=1; }
"$KT" devices --bogus >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || { echo "--bogus exit $rc, want 2"; fail=1; }

[ $fail -eq 0 ] && echo "devices: all checks passed"
exit $fail

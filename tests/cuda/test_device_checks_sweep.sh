#!/bin/sh
# tests/cuda/test_device_checks_sweep.sh KILN_TRAIN CUDA_BUILT
# scripts/gpu/device-checks' sweep section (ONLY=sweep) on a mock pack, no
# GPU: the real kiln-train's --list_variants drives it; the timed runs are
# a mock kiln-train whose bn-cudnn variant disagrees with the CPU reference
# in bf16 and whose fused variant hangs in tf32 (killed by its timeout), and
# a mock PyTorch. The table has a row for every variant x precision (the
# not-built ones say so), the failing and hung rows say why and are named
# in FAILED, and the runs after them still ran: a failing variant never
# stops the others; the fastest correct variant per precision and its ratio
# are printed.
set -u
KT=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/pack/bin" "$tmp/path" "$tmp/out"
cp "$KT" "$tmp/pack/bin/kiln-train.real"
cat > "$tmp/pack/bin/kiln-train" <<'MOCK'
#!/bin/sh
d=$(dirname "$0")
case "$*" in
*--list_variants*) exec "$d/kiln-train.real" "$@" ;;
devices*) exit 0 ;;
esac
v=base p=fp32
for a in "$@"; do
    case $a in --variant=*) v=${a#--variant=} ;; --precision=*) p=${a#--precision=} ;; esac
done
if [ "$v" = bn-cudnn ] && [ "$p" = bf16 ]; then
    echo "CHECK variant=$v precision=$p loss=9 reference=2 FAILED"
    echo "kiln-train resnet50: --check: the variant disagrees with the CPU reference; not timed" >&2
    exit 1
fi
[ "$v" = fused ] && [ "$p" = tf32 ] && sleep 100
echo "CHECK variant=$v precision=$p loss=2 reference=2 ok"
echo "Variant:     $v (from --variant)"
case $v in base) ips=1000 ;; fused) ips=1300 ;; *) ips=900 ;; esac
echo "total images/sec: $ips"
echo "achieved TFLOP/s: 12.3 (12.300 GFLOP per training image)"
echo "device memory in use: 20480 MiB (variant $v)"
MOCK
cat > "$tmp/path/python3" <<'MOCK'
#!/bin/sh
case "$*" in *pytorch_resnet50.py*) ;; *) exit 1 ;; esac
echo '{"peer": "pytorch", "images_per_sec": 1100.0, "achieved_tflops": 13.5, "device_used_mib": 30000}'
MOCK
printf '#!/bin/sh\nexit 0\n' > "$tmp/pack/test_devices.sh"
touch "$tmp/pack/pytorch_resnet50.py"
chmod +x "$tmp/pack/bin/kiln-train" "$tmp/path/python3"
# rows of 4 s at most (the hung one is killed then), 60 s in all
PATH="$tmp/path:$PATH" OUT="$tmp/out" ONLY=sweep SWEEP_BUDGET=60 SWEEP_TIMEOUT=4 \
    SWEEP_PRECISIONS="bf16 tf32" \
    bash "$here/scripts/gpu/device-checks" "$tmp/pack" > "$tmp/log" 2>&1
rc=$?
cat "$tmp/log"
t=$tmp/out/sweep.tsv
need() {
    if grep -q "$1" "$2"; then echo "ok: $3"; else echo "FAIL: $3 ('$1' not in $(basename "$2"))"; fail=1; fi
}
[ -f "$t" ] || { echo "FAIL: no sweep.tsv"; exit 1; }
need "^base	bf16	ok	1000	" "$t" "base in bf16 ran and was checked"
need "^bn-cudnn	bf16	FAILED	-	.*disagrees with the CPU reference" "$t" "a disagreeing variant is a row"
need "^fused	bf16	ok	1300	" "$t" "the variant after a failing one still ran"
need "^cudnn-graph	bf16	.*not built" "$t" "a variant not built is a row that says so"
need "^nchw	bf16	.*does not apply (fp32, tf32 only)" "$t" "a variant for other precisions is a row that says so"
need "^nchw	tf32	ok	900	" "$t" "a variant runs in its precisions"
need "^fused	tf32	.*timed out (4 s)" "$t" "a hung variant is killed by its timeout"
need "^pytorch cl	bf16	-	1100" "$t" "PyTorch's figure in the same table"
need "^memory_MiB\|20480" "$t" "device memory in the table"
need "^SWEEP bf16 fastest=fused images_per_sec=1300 pytorch=1100 ratio=1.182" "$tmp/log" "the fastest correct variant and its ratio"
need "FAILED:.*sweep-bn-cudnn-bf16.*sweep-fused-tf32" "$tmp/log" "the failures named in FAILED"
need "^bn-cudnn	tf32	ok	900	" "$t" "the variant after a hung one still ran"
need "sweep: a profile of the fastest correct variant (fused, bf16)" "$tmp/log" "the fastest is profiled"
need "^profile\|kiln's per-op profile" "$tmp/log" "a profile or its fallback said"
[ "$rc" = 1 ] || { echo "FAIL: device-checks exited $rc (want 1: two rows failed)"; fail=1; }
[ $fail = 0 ] && echo "all passed"
exit $fail

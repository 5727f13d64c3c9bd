#!/bin/sh
# bench/gpu_vs_pytorch.sh - kiln-train against PyTorch on one GPU, the same
# GPU in the same run, rounds alternating between the two:
#
#   mlp       Fashion-MNIST MLP, batch 128, SGD momentum, MLP_STEPS steps after
#             10 of warm-up: kiln-train mnist --device=/gpu:0 (its step a
#             CUDA graph) and, to show what the graph is worth, the same with
#             KILN_CUDA_GRAPHS=0; PyTorch eager with the data set in GPU
#             memory (bench/pytorch_mnist.py --device cuda)
#   resnet50  ResNet-50 v1.5, synthetic 224x224, batch R50_BATCH,
#             R50_STEPS timed steps: kiln-train resnet50 --synthetic
#             --device=/gpu:0 in fp32 (TF32 off) and tf32, against
#             bench/pytorch_resnet50.py fp32 and fp32 --tf32 (cudnn.benchmark
#             on); and kiln-train resnet50 --precision=bf16 (mixed: fp32
#             masters and batch norm, bf16-rounded convolution inputs on TF32
#             tensor cores, docs/gpu-training.md) against PyTorch's AMP bf16
#             with channels-last (its fastest eager form).
#
# Each line "RATIO name=x" is kiln's best over PyTorch's best of the rounds;
# "MFU name=x" divides kiln's achieved TFLOP/s by PEAK_FP32 / PEAK_TF32 /
# PEAK_BF16 (dense, TFLOP/s; an H100 SXM's 67, 495 and 989 by default).
# Usage: bench/gpu_vs_pytorch.sh [mlp|resnet50|all]
# Env: KT (kiln-train), PY (python3 with torch), DATA_DIR, ROUNDS (2), PT_PEERS (0:
#      no PyTorch tf32 ResNet run; the bf16 one always runs: it is a ratio),
#      R50_ROUNDS (ROUNDS), MLP_STEPS (3000), R50_BATCH (256), R50_STEPS (20),
#      OUT (a folder for logs)
set -u
WHAT=${1:-all}
KT=${KT:-build/bin/kiln-train}
PY=${PY:-python3}
HERE=$(dirname "$0")
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
ROUNDS=${ROUNDS:-2}
R50_ROUNDS=${R50_ROUNDS:-$ROUNDS}
MLP_STEPS=${MLP_STEPS:-3000}
R50_BATCH=${R50_BATCH:-256}
R50_STEPS=${R50_STEPS:-20}
PEAK_FP32=${PEAK_FP32:-67}
PEAK_TF32=${PEAK_TF32:-495}
PEAK_BF16=${PEAK_BF16:-989}
LOG=${OUT:-/tmp}
export PYTHONUNBUFFERED=1
num() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | tail -1; }
best() { awk 'BEGIN{m=0} {if ($1+0 > m) m=$1+0} END{printf "%.2f", m}'; }
ratio() { awk -v k="$1" -v p="$2" 'BEGIN{ if (p > 0) printf "%.3f", k / p; else print "n/a" }'; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

if [ "$WHAT" = mlp ] || [ "$WHAT" = all ]; then
    echo "== mlp: batch 128, $MLP_STEPS steps, $ROUNDS rounds"
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        r=$((r + 1))
        k=$(timeout 120 "$KT" mnist --device=/gpu:0 --data_dir="$DATA_DIR" \
            --max_steps="$MLP_STEPS" --log_format=json 2>>"$LOG/mlp-kiln.err" | tail -1 |
            num samples_per_sec)
        e=$(KILN_CUDA_GRAPHS=0 timeout 120 "$KT" mnist --device=/gpu:0 --data_dir="$DATA_DIR" \
            --max_steps="$MLP_STEPS" --log_format=json 2>>"$LOG/mlp-kiln.err" | tail -1 |
            num samples_per_sec)
        p=$(timeout 180 "$PY" "$HERE/pytorch_mnist.py" --device cuda --data_dir="$DATA_DIR" \
            --max_steps="$MLP_STEPS" 2>>"$LOG/mlp-pt.err" | num samples_per_sec)
        echo "${k:-0}" >> "$T/mk"; echo "${e:-0}" >> "$T/me"; echo "${p:-0}" >> "$T/mp"
        echo "   round $r: kiln ${k:-failed} (graphs off ${e:-failed})  pytorch ${p:-failed} samples/s"
    done
    K=$(best < "$T/mk"); E=$(best < "$T/me"); P=$(best < "$T/mp")
    echo "== mlp best: kiln $K samples/s (graphs off $E), pytorch $P samples/s"
    echo "RATIO mlp=$(ratio "$K" "$P")"
    echo "RATIO mlp_nographs=$(ratio "$E" "$P")"
fi

if [ "$WHAT" = resnet50 ] || [ "$WHAT" = all ]; then
    echo "== resnet50: batch $R50_BATCH, 224x224, $R50_STEPS steps, $R50_ROUNDS rounds (fp32), 1 (tf32)"
    r=0
    while [ "$r" -lt "$R50_ROUNDS" ]; do
        r=$((r + 1))
        # the algorithm cuDNN runs for each convolution, timed or not (stderr)
        KILN_CUDNN_VERBOSE=1 timeout 240 "$KT" resnet50 --synthetic --device=/gpu:0 \
            --precision=fp32 --batch_size="$R50_BATCH" --num_batches="$R50_STEPS" \
            --num_warmup_batches=5 > "$T/k.out" 2> "$LOG/r50-algos.txt"
        cat "$T/k.out" >> "$LOG/r50-kiln.log"
        k=$(sed -n 's/^total images\/sec: //p' "$T/k.out")
        kt=$(sed -n 's/^achieved TFLOP\/s: \([0-9.]*\).*/\1/p' "$T/k.out")
        p=$(timeout 240 "$PY" "$HERE/pytorch_resnet50.py" --device cuda --batch_size "$R50_BATCH" \
            --steps "$R50_STEPS" --warmup 5 --rounds 1 --precision fp32 \
            --peak_tflops "$PEAK_FP32" 2>>"$LOG/r50-pt.err" | num images_per_sec)
        echo "${k:-0}" >> "$T/rk"; echo "${kt:-0}" >> "$T/rkt"; echo "${p:-0}" >> "$T/rp"
        echo "   round $r fp32: kiln ${k:-failed} pytorch ${p:-failed} images/s"
        [ -n "$k" ] || tail -5 "$T/k.out" "$LOG/r50-algos.txt"
    done
    echo "   cuDNN's choices (direction, algorithm, math; count):"
    sed -n 's/^kiln cudnn: \([a-z-]*\) .*: algo \([0-9]*\) math \([0-9-]*\) \([a-z]*\).*/\1 algo \2 math \3 \4/p' \
        "$LOG/r50-algos.txt" | sort | uniq -c | sed 's/^/     /'
    K=$(best < "$T/rk"); KT_F=$(best < "$T/rkt"); P=$(best < "$T/rp")
    echo "== resnet50 fp32 best: kiln $K images/s ($KT_F TFLOP/s), pytorch $P images/s"
    echo "RATIO resnet50_fp32=$(ratio "$K" "$P")"
    echo "MFU resnet50_fp32=$(ratio "$KT_F" "$PEAK_FP32")"
    # the tf32 run also profiles one step after its timed ones (where the time goes)
    KILN_RESNET_PROFILE=1 timeout 240 "$KT" resnet50 --synthetic --device=/gpu:0 --precision=tf32 \
        --batch_size="$R50_BATCH" --num_batches="$R50_STEPS" --num_warmup_batches=5 > "$T/k.out" 2>&1
    cat "$T/k.out" >> "$LOG/r50-kiln.log"
    k=$(sed -n 's/^total images\/sec: //p' "$T/k.out")
    kt=$(sed -n 's/^achieved TFLOP\/s: \([0-9.]*\).*/\1/p' "$T/k.out")
    p=""
    [ "${PT_PEERS:-1}" = 0 ] ||
        p=$(timeout 240 "$PY" "$HERE/pytorch_resnet50.py" --device cuda --batch_size "$R50_BATCH" \
            --steps "$R50_STEPS" --warmup 5 --rounds 1 --precision fp32 --tf32 \
            --peak_tflops "$PEAK_TF32" 2>>"$LOG/r50-pt.err" | num images_per_sec)
    pt=${p:-failed}
    [ "${PT_PEERS:-1}" = 0 ] && pt="not run (PT_PEERS=0)"
    echo "== resnet50 tf32: kiln ${k:-failed} images/s (${kt:-?} TFLOP/s), pytorch $pt"
    echo "RATIO resnet50_tf32=$(ratio "${k:-0}" "${p:-0}")"
    echo "MFU resnet50_tf32=$(ratio "${kt:-0}" "$PEAK_TF32")"
    sed -n '/^profile/,$p' "$T/k.out"
    [ -n "$k" ] || tail -5 "$T/k.out"
    # bf16: kiln's mixed precision against PyTorch's AMP, channels-last
    timeout 240 "$KT" resnet50 --synthetic --device=/gpu:0 --precision=bf16 \
        --batch_size="$R50_BATCH" --num_batches="$R50_STEPS" --num_warmup_batches=5 \
        > "$T/k.out" 2>&1
    cat "$T/k.out" >> "$LOG/r50-kiln.log"
    k=$(sed -n 's/^total images\/sec: //p' "$T/k.out")
    kt=$(sed -n 's/^achieved TFLOP\/s: \([0-9.]*\).*/\1/p' "$T/k.out")
    [ -n "$k" ] || tail -5 "$T/k.out"
    p=$(timeout 240 "$PY" "$HERE/pytorch_resnet50.py" --device cuda --batch_size "$R50_BATCH" \
        --steps "$R50_STEPS" --warmup 5 --rounds 1 --precision bf16 --channels_last \
        --peak_tflops "$PEAK_BF16" 2>>"$LOG/r50-pt.err" | num images_per_sec)
    [ -n "$p" ] || tail -5 "$LOG/r50-pt.err"
    echo "== resnet50 bf16: kiln ${k:-failed} images/s (${kt:-?} TFLOP/s), pytorch ${p:-failed} images/s (AMP bf16, channels-last)"
    echo "RATIO resnet50_bf16=$(ratio "${k:-0}" "${p:-0}")"
    echo "MFU resnet50_bf16=$(ratio "${kt:-0}" "$PEAK_BF16")"
fi

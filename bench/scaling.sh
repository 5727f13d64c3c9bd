#!/bin/sh
# bench/scaling.sh - data-parallel scaling of kiln-train, and kiln against
# PyTorch DDP, in the same run. Usage: bench/scaling.sh [mlp|cnn|both] [speed|full]
#
#  speed (default): each round runs, one after the other,
#    k1      kiln, 1 replica, 1 thread, batch 128
#    k2w     kiln, 2 replicas (--world_size=2), 1 thread each, global batch 256
#            (128 per replica: the usual weak-scaling figure), the optimizer
#            not sharded (--shard_optimizer=0: the overlapped all-reduce)
#    k2z     k2w with the optimizer sharded (ZeRO-1: kiln-train's default,
#            named so that a KILN_EXTRA all-reduce flag is refused, not run
#            unsharded under this label)
#    k2s     kiln, 2 replicas (default: sharded), global batch 128 (64 per
#            replica: strong scaling)
#    ind     the bound: two independent k1 trainings at once (no
#            communication at all), their samples/s summed: what this machine
#            gives two 1-thread processes at that moment
#    k2l     the synchronous ceiling: 2 replicas that each run one process
#            of the bound (the fused single-replica step, batch 128, all the
#            data) and wait for each other at one barrier per step, nothing
#            exchanged (KILN_DIST_PROFILE=lockstep, for measuring only). Its
#            distance from the bound is what keeping replicas in step costs
#            on this machine, before any byte is exchanged
#    k2x     (NOCOMM=1 only) k2w with the all-reduce skipped
#            (KILN_DIST_PROFILE=nocomm, unsharded: wrong training, for
#            measuring only)
#    ddp     PyTorch DDP (gloo), 2 processes, 1 thread each, global batch 256
#    ddp1    PyTorch, 1 process, 1 thread, batch 128 (DDP's own baseline)
#    pind    DDP's bound: two independent ddp1 trainings at once, summed
#  for ROUNDS rounds, alternating (one of each per round); best of each.
#  Ratios: k2w/k1 (weak), k2z/k1 (weak, sharded), k2s/k1 (strong), ind/k1
#  (the bound); kiln's speed-up as a fraction of the bound: k2w/ind and
#  k2z/ind (the issue's goal: >= 0.95), from the bests and, less exposed to
#  a noisy round, the median of each round's own ratio; k2l/ind (the
#  synchronous ceiling) and k2z/k2l (kiln's step against it); DDP's: ddp/pind;
#  k2z/ddp (kiln's 2 replicas against DDP's), ddp/ddp1 (DDP's weak scaling).
#  full: 5 epochs of the MLP at global batch 128, 1 replica vs 2 replicas, and
#  DDP 2 processes: test accuracy (convergence at the same global batch).
#
# samples/s count all replicas' examples, after the first 10 steps (warm-up),
# training steps only. PyTorch gets OPENBLAS_CORETYPE=SkylakeX (Debian's
# OpenBLAS otherwise picks generic kernels on this CPU); kiln gets nothing (it
# fixes the core choice itself). Env: BUILD (default build-rel), ROUNDS (5),
# STEPS (mlp 300, cnn 40), DATA_DIR, KILN_EXTRA (more kiln-train flags),
# PEERS=0 (leave PyTorch out: kiln against its bound and ceiling only, about
# a sixth of the time per round, for the many rounds this noisy VM needs).
# The machine's 2 cores are shared: only ratios from the same run mean much.
set -eu
WHICH=${1:-both}
MODE=${2:-speed}
BUILD=${BUILD:-build-rel}
ROUNDS=${ROUNDS:-5}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
KILN_EXTRA=${KILN_EXTRA:-}
KENV=
KT="$BUILD/bin/kiln-train"
PY=/usr/bin/python3
HERE=$(dirname "$0")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
num() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | tail -1; }
best() { awk 'BEGIN{m=0} {if ($1+0 > m) m=$1+0} END{printf "%.1f", m}' "$1"; }
ratio() { awk "BEGIN{if ($2 + 0 == 0) printf \"n/a\"; else printf \"%.2f\", $1 / $2}"; }
# the median over the rounds of file1's value / file2's value in that round
rmedian() { paste "$1" "$2" | awk '$2 + 0 != 0 {print $1 / $2}' | sort -g |
    awk '{v[NR] = $1} END {if (!NR) printf "n/a"; else printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

kiln() { # model, steps, extra flags...
    m=$1; s=$2; shift 2
    # shellcheck disable=SC2086
    env -u OPENBLAS_CORETYPE $KENV "$KT" mnist --device=/cpu:0 --model="$m" --data_dir="$DATA_DIR" --max_steps="$s" \
        --threads=1 --log_format=json $KILN_EXTRA "$@" | tail -1 | num samples_per_sec
}
ddp() { # model, steps, world, global batch
    OPENBLAS_CORETYPE=SkylakeX $PY "$HERE/pytorch_ddp_mnist.py" --model="$1" --max_steps="$2" \
        --world_size="$3" --batch_size="$4" --threads=1 --data_dir="$DATA_DIR" | num samples_per_sec
}
pt1() { # model, steps: one process, batch 128
    OPENBLAS_CORETYPE=SkylakeX $PY "$HERE/pytorch_mnist.py" --model="$1" --max_steps="$2" \
        --threads=1 --data_dir="$DATA_DIR" | num samples_per_sec
}

echo "== machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== kiln: $KT $KILN_EXTRA"
speed() {
    M=$1
    if [ "$M" = cnn ]; then S=${STEPS:-40}; else S=${STEPS:-300}; fi
    echo "== speed: $M, $S steps, $ROUNDS rounds (samples/s of all replicas)"
    for k in k1 k2w k2z k2s ind k2l k2x ddp ddp1 pind; do : > "$T/$M.$k"; done
    r=0
    while [ $r -lt "$ROUNDS" ]; do
        r=$((r + 1))
        kiln "$M" "$S" --batch_size=128 >> "$T/$M.k1"
        kiln "$M" "$S" --batch_size=256 --world_size=2 --shard_optimizer=0 >> "$T/$M.k2w"
        kiln "$M" "$S" --batch_size=256 --world_size=2 --shard_optimizer=1 >> "$T/$M.k2z"
        kiln "$M" "$S" --batch_size=128 --world_size=2 >> "$T/$M.k2s"
        # the bound: two independent trainings at once, summed
        kiln "$M" "$S" --batch_size=128 > "$T/ind.a" &
        pa=$!
        kiln "$M" "$S" --batch_size=128 > "$T/ind.b"
        wait $pa
        awk '{s += $1} END {printf "%.1f\n", s}' "$T/ind.a" "$T/ind.b" >> "$T/$M.ind"
        # (their per-replica timing lines go to /dev/null)
        KENV=KILN_DIST_PROFILE=lockstep
        kiln "$M" "$S" --batch_size=256 --world_size=2 2> /dev/null >> "$T/$M.k2l"
        if [ "${NOCOMM:-0}" = 1 ]; then
            KENV=KILN_DIST_PROFILE=nocomm
            kiln "$M" "$S" --batch_size=256 --world_size=2 --shard_optimizer=0 2> /dev/null >> "$T/$M.k2x"
        fi
        KENV=
        PEERLINE=
        if [ "${PEERS:-1}" != 0 ]; then
            ddp "$M" "$S" 2 256 >> "$T/$M.ddp"
            pt1 "$M" "$S" >> "$T/$M.ddp1"
            pt1 "$M" "$S" > "$T/pind.a" &
            pa=$!
            pt1 "$M" "$S" > "$T/pind.b"
            wait $pa
            awk '{s += $1} END {printf "%.1f\n", s}' "$T/pind.a" "$T/pind.b" >> "$T/$M.pind"
            PEERLINE="  ddp 2x128 $(tail -1 "$T/$M.ddp")  torch 1x128 $(tail -1 "$T/$M.ddp1")  torch bound $(tail -1 "$T/$M.pind")"
        fi
        echo "   round $r: kiln 1x128 $(tail -1 "$T/$M.k1")  kiln 2x128 all-reduce $(tail -1 "$T/$M.k2w")  sharded $(tail -1 "$T/$M.k2z")  kiln 2x64 $(tail -1 "$T/$M.k2s")  bound $(tail -1 "$T/$M.ind")  lockstep $(tail -1 "$T/$M.k2l")$PEERLINE"
    done
    K1=$(best "$T/$M.k1"); K2W=$(best "$T/$M.k2w"); K2Z=$(best "$T/$M.k2z"); K2S=$(best "$T/$M.k2s")
    IND=$(best "$T/$M.ind"); D2=$(best "$T/$M.ddp"); D1=$(best "$T/$M.ddp1"); PIND=$(best "$T/$M.pind")
    echo "RESULT $M best of $ROUNDS: kiln 1 replica $K1, 2 replicas x128 $K2Z (sharded, the default; all-reduce $K2W), 2 replicas x64 $K2S, two independent $IND samples/s"
    echo "RESULT $M kiln scaling: weak (2x128 vs 1x128) sharded $(ratio "$K2Z" "$K1")x, all-reduce $(ratio "$K2W" "$K1")x, strong (global 128) $(ratio "$K2S" "$K1")x; the bound (two independent trainings) $(ratio "$IND" "$K1")x"
    echo "RESULT $M speed-up as a fraction of the bound, bests: kiln sharded $(ratio "$K2Z" "$IND"), all-reduce $(ratio "$K2W" "$IND") (goal >= 0.95)"
    echo "RESULT $M speed-up as a fraction of the bound, median of the $ROUNDS rounds' own ratios: kiln sharded $(rmedian "$T/$M.k2z" "$T/$M.ind"), all-reduce $(rmedian "$T/$M.k2w" "$T/$M.ind")"
    echo "RESULT $M the synchronous ceiling (2 replicas, one barrier per step, nothing exchanged) as a fraction of the bound: median $(rmedian "$T/$M.k2l" "$T/$M.ind"), bests $(ratio "$(best "$T/$M.k2l")" "$IND"); kiln sharded as a fraction of that ceiling: median $(rmedian "$T/$M.k2z" "$T/$M.k2l"), bests $(ratio "$K2Z" "$(best "$T/$M.k2l")")"
    # how much the machine itself moved between rounds: the bound is the same
    # work every time, so its spread is the noise every other column carries
    echo "RESULT $M the bound over the $ROUNDS rounds: $(sort -g "$T/$M.ind" | awk '{v[NR] = $1} END {printf "%.0f to %.0f samples/s, the highest %.2fx the lowest", v[1], v[NR], v[NR] / v[1]}') (a spread above ~1.1x: compare medians of many rounds, not single rounds)"
    if [ "${NOCOMM:-0}" = 1 ]; then
        echo "RESULT $M 2 replicas with the all-reduce skipped (no barrier either), as a fraction of the bound: median $(rmedian "$T/$M.k2x" "$T/$M.ind"), bests $(ratio "$(best "$T/$M.k2x")" "$IND")"
    fi
    if [ "${PEERS:-1}" = 0 ]; then
        echo "RESULT $M PyTorch left out (PEERS=0)"
        return
    fi
    echo "RESULT $M PyTorch best of $ROUNDS: DDP 2x128 $D2, PyTorch 1x128 $D1, two independent $PIND samples/s; DDP's speed-up as a fraction of its bound: bests $(ratio "$D2" "$PIND") (its bound $(ratio "$PIND" "$D1")x), median $(rmedian "$T/$M.ddp" "$T/$M.pind")"
    echo "RESULT $M kiln 2 replicas / PyTorch DDP 2 processes: sharded $(ratio "$K2Z" "$D2")x, all-reduce $(ratio "$K2W" "$D2")x (DDP's own weak scaling $(ratio "$D2" "$D1")x)"
}

full() {
    echo "== convergence: MLP, 5 epochs, global batch 128"
    A1=$(env -u OPENBLAS_CORETYPE "$KT" mnist --device=/cpu:0 --model=mlp --data_dir="$DATA_DIR" --train_epochs=5 \
        --threads=1 --batch_size=128 --log_format=json | tail -1)
    A2=$(env -u OPENBLAS_CORETYPE "$KT" mnist --device=/cpu:0 --model=mlp --data_dir="$DATA_DIR" --train_epochs=5 \
        --world_size=2 --batch_size=128 --log_format=json | tail -1)
    AD=$(OPENBLAS_CORETYPE=SkylakeX $PY "$HERE/pytorch_ddp_mnist.py" --model=mlp --epochs=5 \
        --world_size=2 --batch_size=128 --threads=1 --data_dir="$DATA_DIR")
    echo "   kiln 1 replica:  $A1"
    echo "   kiln 2 replicas: $A2"
    echo "   pytorch ddp 2:   $AD"
    echo "RESULT MLP 5 epochs, global batch 128: test accuracy kiln 1 replica $(echo "$A1" | num test_accuracy), kiln 2 replicas $(echo "$A2" | num test_accuracy), DDP 2 processes $(echo "$AD" | num test_accuracy)"
}

case "$WHICH" in
mlp | cnn) [ "$MODE" = full ] || speed "$WHICH" ;;
both) [ "$MODE" = full ] || { speed mlp; speed cnn; } ;;
*) echo "usage: bench/scaling.sh [mlp|cnn|both] [speed|full]" >&2; exit 2 ;;
esac
[ "$MODE" = full ] && full
exit 0

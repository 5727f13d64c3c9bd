#!/bin/sh
# bench/allreduce_vs_mpi.sh [BUILD_DIR] - kiln's shm all-reduce against
# OpenMPI's MPI_Allreduce, 2 ranks on this host, 4 KiB .. 256 MiB, in one run.
#
# Columns: kiln "plain" all-reduces malloc'd memory (as the MPI peer does);
# kiln "registered" a buffer from kiln_comm_alloc_f32 (shared memory, no copies
# through the segment), as a training loop's gradient buffer would be.
#
# Two tables:
#   touched  every rank rewrites its buffer before each all-reduce (untimed,
#            then a barrier), as the backward pass does in training; only the
#            all-reduce is timed. The realistic case.
#   hot      the same buffer reduced again and again (nccl-tests' way). On a
#            CPU this leaves each rank's slice in the cache of the core that
#            reduces it, which flatters algorithms that always give a slice to
#            the same rank (kiln's registered path).
# Both programs time the same way (bench/allreduce_bench.c,
# bench/allreduce_mpi_peer.c) and print nccl-tests' busbw. The runs are
# interleaved REPEAT times (default 3) so background load hits all alike; the
# tables show the median busbw per size and the ratios to MPI.
#
#   REPEAT=5 MIN=4K MAX=256M MODES="touched hot" bench/allreduce_vs_mpi.sh build
# Not a test: keep it out of CTest (timings on a shared machine are noisy).
set -eu
build=${1:-build}
repeat=${REPEAT:-3}
min=${MIN:-4K}
max=${MAX:-256M}
np=${NP:-2}
modes=${MODES:-touched hot}
kiln="$build/bin/kiln-allreduce-bench"
peer="$build/bin/kiln-allreduce-mpi-peer"
for f in "$kiln" "$peer"; do
    [ -x "$f" ] || { echo "missing $f: cmake --build $build --target kiln-allreduce-bench kiln-allreduce-mpi-peer" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# kiln: $kiln --world_size $np --backend shm --min_bytes $min --max_bytes $max [--registered] [--touch]"
echo "# mpi:  mpirun -np $np --oversubscribe --bind-to none $peer --min_bytes $min --max_bytes $max [--touch]"
for mode in $modes; do
    flag=
    [ "$mode" = touched ] && flag=--touch
    i=0
    while [ $i -lt "$repeat" ]; do
        "$kiln" --world_size "$np" --backend shm --min_bytes "$min" --max_bytes "$max" $flag \
            >>"$tmp/$mode.kiln"
        "$kiln" --world_size "$np" --backend shm --min_bytes "$min" --max_bytes "$max" $flag \
            --registered >>"$tmp/$mode.kreg"
        mpirun -np "$np" --oversubscribe --bind-to none "$peer" --min_bytes "$min" \
            --max_bytes "$max" $flag >>"$tmp/$mode.mpi" 2>"$tmp/mpi.err" ||
            { cat "$tmp/mpi.err" >&2; exit 1; }
        i=$((i + 1))
    done
    echo
    echo "## $mode buffers: busbw in GB/s (nccl-tests definition), median of $repeat runs each"
    awk '
    function field(line, name,   r) {
        r = line; sub(".*\"" name "\":", "", r); sub("[,}].*", "", r); return r + 0
    }
    function median(list,   n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    FNR == 1 { side++ }
    {
        b = field($0, "bytes"); bw = field($0, "busbw_gbps")
        if (side == 1) k[b] = k[b] " " bw; else if (side == 2) g[b] = g[b] " " bw; else m[b] = m[b] " " bw
        if (!(b in seen)) { seen[b] = 1; order[++n] = b }
    }
    END {
        printf "%11s %11s %11s %11s %9s %9s\n", "bytes", "kiln_plain", "kiln_reg", "mpi", "plain/mpi", "reg/mpi"
        for (i = 1; i <= n; i++) {
            b = order[i]; kb = median(k[b]); gb = median(g[b]); mb = median(m[b])
            printf "%11d %11.3f %11.3f %11.3f %8.2fx %8.2fx\n", b, kb, gb, mb, (mb > 0 ? kb / mb : 0), (mb > 0 ? gb / mb : 0)
        }
    }' "$tmp/$mode.kiln" "$tmp/$mode.kreg" "$tmp/$mode.mpi"
done
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

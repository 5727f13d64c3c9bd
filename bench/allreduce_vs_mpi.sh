#!/bin/sh
# bench/allreduce_vs_mpi.sh [BUILD_DIR] - kiln's shm all-reduce against
# OpenMPI's MPI_Allreduce, 2 ranks on this host, 4 KiB .. 256 MiB, in one run.
#
# Two kiln columns: "plain" all-reduces malloc'd memory (as the MPI peer does),
# "registered" a buffer from kiln_comm_alloc_f32 (shared memory, no copies
# through the segment), as a training loop's gradient buffer would be.
#
# Both sides are timed the same way (same sizes, iteration counts, warm-up,
# in place, barriers around the timed loop; bench/allreduce_bench.c and
# bench/allreduce_mpi_peer.c), and print nccl-tests' busbw. The two runs are
# interleaved REPEAT times (default 3) so background load hits both alike; the
# table shows the median busbw per size of each and their ratio.
#
#   REPEAT=5 MIN=4K MAX=256M bench/allreduce_vs_mpi.sh build
# Not a test: keep it out of CTest (timings on a shared machine are noisy).
set -eu
build=${1:-build}
repeat=${REPEAT:-3}
min=${MIN:-4K}
max=${MAX:-256M}
np=${NP:-2}
kiln="$build/bin/kiln-allreduce-bench"
peer="$build/bin/kiln-allreduce-mpi-peer"
for f in "$kiln" "$peer"; do
    [ -x "$f" ] || { echo "missing $f: cmake --build $build --target kiln-allreduce-bench kiln-allreduce-mpi-peer" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# kiln: $kiln --world_size $np --backend shm --min_bytes $min --max_bytes $max [--registered]"
echo "# mpi:  mpirun -np $np --oversubscribe --bind-to none $peer --min_bytes $min --max_bytes $max"
i=0
while [ $i -lt "$repeat" ]; do
    "$kiln" --world_size "$np" --backend shm --min_bytes "$min" --max_bytes "$max" >>"$tmp/kiln"
    "$kiln" --world_size "$np" --backend shm --min_bytes "$min" --max_bytes "$max" --registered \
        >>"$tmp/kreg"
    mpirun -np "$np" --oversubscribe --bind-to none "$peer" --min_bytes "$min" --max_bytes "$max" \
        >>"$tmp/mpi" 2>"$tmp/mpi.err" || { cat "$tmp/mpi.err" >&2; exit 1; }
    i=$((i + 1))
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# median busbw per size for each side, then the table
awk -v repeat="$repeat" '
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
    printf "# busbw in GB/s (nccl-tests definition), median of %d runs each\n", repeat
    printf "%11s %11s %11s %11s %8s %8s\n", "bytes", "kiln_plain", "kiln_reg", "mpi", "plain/mpi", "reg/mpi"
    for (i = 1; i <= n; i++) {
        b = order[i]; kb = median(k[b]); gb = median(g[b]); mb = median(m[b])
        printf "%11d %11.3f %11.3f %11.3f %8.2fx %8.2fx\n", b, kb, gb, mb, (mb > 0 ? kb / mb : 0), (mb > 0 ? gb / mb : 0)
    }
}' "$tmp/kiln" "$tmp/kreg" "$tmp/mpi"

/* allreduce_mpi_peer.c - the comparison point: plain MPI_Allreduce, timed
 * exactly as kiln-allreduce-bench times kiln (same sizes, iteration counts,
 * warm-up, barriers, in place, same JSON). Run under mpirun -np N.
 *
 *   mpirun -np 2 kiln-allreduce-mpi-peer [--min_bytes B --max_bytes B | --bytes B]
 *                                        [--iters K] [--warmup W] [--touch] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'k' || *end == 'K') v *= 1024;
    if (*end == 'm' || *end == 'M') v *= 1024 * 1024;
    if (*end == 'g' || *end == 'G') v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

static int auto_iters(size_t bytes)
{
    size_t k = bytes ? ((size_t)512 << 20) / bytes : 2000;
    return k < 5 ? 5 : k > 2000 ? 2000 : (int)k;
}

int main(int argc, char **argv)
{
    size_t lo = 4096, hi = (size_t)256 << 20;
    int iters = 0, warmup = 2, touch = 0, rank, n;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--touch")) touch = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--touch")) {
            i--;
            continue;
        }
        if (!strcmp(argv[i], "--min_bytes"))
            lo = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--max_bytes"))
            hi = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--bytes"))
            lo = hi = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = atoi(argv[i + 1]);
    }
    size_t maxn = hi / sizeof(float);
    float *buf = malloc((maxn ? maxn : 1) * sizeof(float));
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < maxn; i++)
        buf[i] = (float)((i % 97) + 1) * 1e-3f * (float)(rank + 1);
    for (size_t bytes = lo;; bytes *= 2) {
        if (bytes > hi) bytes = hi;
        int count = (int)(bytes / sizeof(float));
        int k = iters > 0 ? iters : auto_iters(bytes);
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = 0;
        if (!touch) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < k; i++)
                MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            t = (MPI_Wtime() - t0) / k;
        } else {
            /* as kiln-allreduce-bench --touch: rewrite, barrier, time one call */
            for (int i = 0; i < k; i++) {
                for (int j = 0; j < count; j++)
                    buf[j] = (float)((j + i) & 1023) * 1e-3f * (float)(rank + 1);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                t += MPI_Wtime() - t0;
            }
            t /= k;
        }
        if (rank == 0) {
            double algbw = (double)count * sizeof(float) / t / 1e9;
            printf("{\"bytes\":%zu,\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f,\"time_us\":%.2f,"
                   "\"world_size\":%d,\"backend\":\"MPI_Allreduce\",\"iters\":%d}\n",
                   (size_t)count * sizeof(float), algbw, algbw * 2.0 * (n - 1) / n, t * 1e6, n, k);
            fflush(stdout);
        }
        if (bytes >= hi) break;
    }
    free(buf);
    MPI_Finalize();
    return 0;
}

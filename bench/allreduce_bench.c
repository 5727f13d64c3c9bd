/* allreduce_bench.c - kiln-allreduce-bench: all-reduce bandwidth, nccl-tests style.
 *
 *   kiln-allreduce-bench --world_size N [--backend shm|mpi]
 *                        [--bytes B | --min_bytes B --max_bytes B] [--iters K]
 *                        [--warmup W] [--chunk_bytes C] [--check] [--registered] [--touch]
 *
 * --touch: each rank rewrites its buffer before every all-reduce (untimed, then
 * a barrier), as a backward pass would; only the all-reduces are timed. Without
 * it the same buffer is reduced again and again (nccl-tests' way), which on a
 * CPU leaves each rank's slice hot in the cache of the core that reduces it.
 *
 * --registered: the buffer comes from kiln_comm_alloc_f32 (shm: shared memory,
 * all-reduce without copies through the segment), as a training loop's
 * gradient buffer would; default plain malloc memory, as MPI's peer uses.
 * shm: forks N local ranks. mpi: run it under mpirun (every process is a rank).
 * Prints one JSON object per size (sizes double from min to max):
 *   {"bytes":..,"algbw_gbps":..,"busbw_gbps":..,"time_us":..,...}
 * with nccl-tests' definitions: algbw = bytes / time, busbw = algbw * 2(n-1)/n,
 * GB = 1e9 bytes; time = mean over K in-place all-reduces between two barriers.
 * Bytes are rounded down to whole floats. */
#include "kiln/collective.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct opts {
    int world;
    kiln_coll_backend backend;
    size_t min_bytes, max_bytes, chunk;
    int iters, warmup, check, registered, touch;
    char key[64];
} opts;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    switch (*end) {
    case 'k':
    case 'K':
        v *= 1024;
        end++;
        break;
    case 'm':
    case 'M':
        v *= 1024 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        v *= 1024.0 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end) return -1;
    *out = (size_t)v;
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: kiln-allreduce-bench --world_size N [--backend shm|mpi] [--bytes B | "
            "--min_bytes B --max_bytes B] [--iters K] [--warmup W] [--chunk_bytes C] "
            "[--check] [--registered] [--touch]\n(sizes take K, M, G suffixes: 4K, 256M)\n");
}

static int auto_iters(size_t bytes)
{
    /* about 512 MiB of traffic per size, 5..2000 calls */
    size_t k = bytes ? ((size_t)512 << 20) / bytes : 2000;
    return k < 5 ? 5 : k > 2000 ? 2000 : (int)k;
}

static int run_rank(const opts *o, int rank)
{
    kiln_comm_config cfg = {0};
    kiln_comm *c = NULL;
    char err[512];
    float *buf = NULL;
    int rc = 1;
    size_t maxn = o->max_bytes / sizeof(float);

    cfg.rank = o->backend == KILN_COLL_MPI ? -1 : rank;
    cfg.world_size = o->backend == KILN_COLL_MPI ? 0 : o->world;
    cfg.backend = o->backend;
    cfg.job_key = o->key;
    cfg.chunk_bytes = o->chunk;
    if (kiln_comm_init(&cfg, &c, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        goto out;
    }
    rank = kiln_comm_rank(c);
    int n = kiln_comm_world_size(c);
    buf = o->registered ? kiln_comm_alloc_f32(c, maxn ? maxn : 1)
                        : malloc((maxn ? maxn : 1) * sizeof(float));
    if (!buf) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        goto out;
    }
    for (size_t i = 0; i < maxn; i++)
        buf[i] = (float)((i % 97) + 1) * 1e-3f * (float)(rank + 1);
    for (size_t bytes = o->min_bytes;; bytes *= 2) {
        if (bytes > o->max_bytes) bytes = o->max_bytes;
        size_t count = bytes / sizeof(float);
        int iters = o->iters > 0 ? o->iters : auto_iters(bytes);
        if (o->check) {
            /* rank r holds (r+1)*v: the sum is v*n(n+1)/2 */
            for (size_t i = 0; i < count; i++)
                buf[i] = (float)((i % 97) + 1) * (float)(rank + 1);
            if (kiln_comm_allreduce_sum_f32(c, buf, count) != KILN_OK) goto fail;
            for (size_t i = 0; i < count; i++)
                if (buf[i] != (float)((i % 97) + 1) * (float)(n * (n + 1) / 2)) {
                    fprintf(stderr, "rank %d: wrong sum at %zu of %zu bytes\n", rank, i, bytes);
                    goto out;
                }
        }
        for (int i = 0; i < o->warmup; i++)
            if (kiln_comm_allreduce_sum_f32(c, buf, count) != KILN_OK) goto fail;
        double t = 0;
        if (!o->touch) {
            if (kiln_comm_barrier(c) != KILN_OK) goto fail;
            double t0 = now_s();
            for (int i = 0; i < iters; i++)
                if (kiln_comm_allreduce_sum_f32(c, buf, count) != KILN_OK) goto fail;
            if (kiln_comm_barrier(c) != KILN_OK) goto fail;
            t = (now_s() - t0) / iters;
        } else {
            /* as in training: the buffer was just written by this rank (the
             * backward pass), so its lines sit in this core's cache, not in
             * the core that reduces them; only the all-reduce is timed */
            for (int i = 0; i < iters; i++) {
                for (size_t j = 0; j < count; j++)
                    buf[j] = (float)((j + (size_t)i) & 1023) * 1e-3f * (float)(rank + 1);
                if (kiln_comm_barrier(c) != KILN_OK) goto fail;
                double t0 = now_s();
                if (kiln_comm_allreduce_sum_f32(c, buf, count) != KILN_OK) goto fail;
                t += now_s() - t0;
            }
            t /= iters;
        }
        if (rank == 0) {
            double algbw = (double)(count * sizeof(float)) / t / 1e9;
            double busbw = algbw * 2.0 * (n - 1) / n;
            printf("{\"bytes\":%zu,\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f,\"time_us\":%.2f,"
                   "\"world_size\":%d,\"backend\":\"%s\",\"buffer\":\"%s\",\"touch\":%s,"
                   "\"iters\":%d}\n",
                   count * sizeof(float), algbw, busbw, t * 1e6, n, kiln_comm_backend_name(c),
                   o->registered ? "registered" : "plain", o->touch ? "true" : "false", iters);
            fflush(stdout);
        }
        if (bytes >= o->max_bytes) break;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "rank %d: %s\n", rank, kiln_comm_error(c));
out:
    if (o->registered)
        kiln_comm_free(c, buf);
    else
        free(buf);
    kiln_comm_destroy(c);
    return rc;
}

/* The whole program as a function, so that kiln-train can offer it as
 * `kiln-train allreduce-bench ...` by compiling this file with
 * -DKILN_ALLREDUCE_BENCH_NO_MAIN and calling this with its own argv (argv[0]
 * the subcommand's name). */
int kiln_allreduce_bench_main(int argc, char **argv);

int kiln_allreduce_bench_main(int argc, char **argv)
{
    opts o = {.world = 0, .backend = KILN_COLL_SHM, .warmup = 2};
    size_t bytes = 0;
    int have_bytes = 0, have_range = 0;

    o.min_bytes = 4096;
    o.max_bytes = (size_t)256 << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char name[64];
        int bad = 0, inline_value = 0;
        /* --name=value as well as --name value, like kiln-train's own flags */
        const char *eq = strchr(a, '=');
        if (a[0] == '-' && eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            v = eq + 1;
            a = name;
            inline_value = 1;
        }
        if (!strcmp(a, "--check")) {
            o.check = 1;
            continue;
        }
        if (!strcmp(a, "--registered")) {
            o.registered = 1;
            continue;
        }
        if (!strcmp(a, "--touch")) {
            o.touch = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--world_size"))
            o.world = atoi(v);
        else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "shm"))
                o.backend = KILN_COLL_SHM;
            else if (!strcmp(v, "mpi"))
                o.backend = KILN_COLL_MPI;
            else
                bad = 1;
        } else if (!strcmp(a, "--bytes"))
            bad = parse_size(v, &bytes), have_bytes = 1;
        else if (!strcmp(a, "--min_bytes"))
            bad = parse_size(v, &o.min_bytes), have_range = 1;
        else if (!strcmp(a, "--max_bytes"))
            bad = parse_size(v, &o.max_bytes), have_range = 1;
        else if (!strcmp(a, "--chunk_bytes"))
            bad = parse_size(v, &o.chunk);
        else if (!strcmp(a, "--iters"))
            o.iters = atoi(v);
        else if (!strcmp(a, "--warmup"))
            o.warmup = atoi(v);
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, "kiln-allreduce-bench: bad option %s %s\n", a, v);
            usage();
            return 2;
        }
        if (!inline_value) i++;
    }
    if (have_bytes && have_range) {
        fprintf(stderr, "kiln-allreduce-bench: --bytes or --min_bytes/--max_bytes, not both\n");
        return 2;
    }
    if (have_bytes) o.min_bytes = o.max_bytes = bytes;
    if (o.min_bytes < sizeof(float)) o.min_bytes = sizeof(float);
    if (o.max_bytes < o.min_bytes) o.max_bytes = o.min_bytes;
    if (!kiln_comm_backend_available(o.backend)) {
        fprintf(stderr, "kiln-allreduce-bench: backend mpi is not built in\n");
        return 2;
    }
    if (o.backend == KILN_COLL_MPI) return run_rank(&o, 0) ? 1 : 0;
    if (o.world < 1 || o.world > 256) {
        fprintf(stderr, "kiln-allreduce-bench: --world_size N (1..256) is required\n");
        usage();
        return 2;
    }
    snprintf(o.key, sizeof o.key, "bench-%d-%ld", (int)getpid(), (long)time(NULL));
    fflush(stdout);
    pid_t *kids = calloc((size_t)o.world, sizeof *kids);
    int failed = 0;
    if (!kids) return 1;
    for (int r = 0; r < o.world; r++) {
        kids[r] = fork();
        if (kids[r] == 0) _exit(run_rank(&o, r));
        if (kids[r] < 0) {
            perror("fork");
            failed = 1;
            break;
        }
    }
    for (int r = 0; r < o.world; r++) {
        int st;
        if (kids[r] <= 0) continue;
        if (waitpid(kids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
    }
    free(kids);
    return failed;
}

#ifndef KILN_ALLREDUCE_BENCH_NO_MAIN
int main(int argc, char **argv)
{
    return kiln_allreduce_bench_main(argc, argv);
}
#endif

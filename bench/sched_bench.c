/* bench/sched_bench.c - one scheduling pass over a long queue, against the
 * issue's bound (10 ms for 10,000 queued jobs on 1,000 nodes).
 *
 *   kiln-sched-bench [NODES] [JOBS]     (defaults 1000, 10000)
 *
 * The cluster is a node config of NODES simulated nodes with 8 V100s each;
 * the queue cycles through four shapes (1 GPU; a master and 2 workers of 2
 * GPUs; CPU only; 4 workers of 4 GPUs). A pass asks kiln_sched_place for
 * every queued job in order, as kilnd's supervisor does. The first pass
 * starts from an idle cluster and fills it; the second is the steady state,
 * the same queue against the full cluster (every job that did not start
 * asks again). Both are timed, best of 5, and printed against the bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/sched.h"
#include "../tests/service/plan_fixture.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The plans of job i (one of four shapes); returns how many. */
static size_t shape(long i, kiln_replica_plan p[2])
{
    static const char v100[] = "NVIDIA_TESLA_V100";
    switch (i % 4) {
    case 0:
        p[0] = plan(KILN_ROLE_MASTER, 1, v100, 1);
        return 1;
    case 1:
        p[0] = plan(KILN_ROLE_MASTER, 1, v100, 2);
        p[1] = plan(KILN_ROLE_WORKER, 2, v100, 2);
        return 2;
    case 2:
        p[0] = plan(KILN_ROLE_MASTER, 1, NULL, 0);
        return 1;
    default:
        p[0] = plan(KILN_ROLE_MASTER, 1, NULL, 0);
        p[1] = plan(KILN_ROLE_WORKER, 4, v100, 4);
        return 2;
    }
}

/* One pass over jobs [0, n) that have not started (started[i] false):
 * returns its seconds and how many started. */
static double pass(kiln_sched *s, long n, bool *started, kiln_placement *pl, long *placed)
{
    char why[256];
    kiln_replica_plan p[2];
    double t0 = now_s();
    *placed = 0;
    for (long i = 0; i < n; i++) {
        if (started[i]) continue;
        size_t np = shape(i, p);
        kiln_err err = kiln_sched_place(s, p, np, &pl[i], why, sizeof why);
        if (err == KILN_OK) {
            started[i] = true;
            (*placed)++;
        } else if (err != KILN_ECONFLICT) {
            fprintf(stderr, "job %ld: %s\n", i, why);
        }
    }
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    long nodes = argc > 1 ? atol(argv[1]) : 1000, jobs = argc > 2 ? atol(argv[2]) : 10000;
    size_t cap = 64 + (size_t)nodes * 96, o = 0;
    char *json = malloc(cap);
    kiln_cluster c = {0};
    kiln_diag d = KILN_DIAG_INIT;
    bool *started = calloc((size_t)jobs, sizeof *started);
    kiln_placement *pl = calloc((size_t)jobs, sizeof *pl);
    double best_fill = 1e9, best_steady = 1e9;
    long placed = 0, again = 0;
    int rc = 1;

    if (!json || !started || !pl || nodes < 1 || jobs < 1) goto out;
    o += (size_t)snprintf(json + o, cap - o, "{\"nodes\": [");
    for (long i = 0; i < nodes; i++)
        o += (size_t)snprintf(json + o, cap - o,
                              "%s{\"name\": \"n%ld\", \"accelerators\": [{\"type\": "
                              "\"NVIDIA_TESLA_V100\", \"count\": 8}]}",
                              i ? "," : "", i);
    o += (size_t)snprintf(json + o, cap - o, "]}");
    if (kiln_cluster_from_json(json, o, &c, &d) != KILN_OK) {
        fprintf(stderr, "node config: %s\n", d.n ? d.v[0].description : "?");
        goto out;
    }
    for (int round = 0; round < 5; round++) {
        kiln_sched *s = kiln_sched_new(&c);
        if (!s) goto out;
        memset(started, 0, (size_t)jobs * sizeof *started);
        double fill = pass(s, jobs, started, pl, &placed);
        double steady = pass(s, jobs, started, pl, &again);
        best_fill = fill < best_fill ? fill : best_fill;
        best_steady = steady < best_steady ? steady : best_steady;
        for (long i = 0; i < jobs; i++)
            kiln_placement_free(&pl[i]);
        kiln_sched_free(s);
    }
    printf("scheduling pass, %ld queued jobs on %ld nodes x 8 GPUs, best of 5: filling an idle "
           "cluster %.3f ms (%ld started), steady (cluster full, %ld asking again, %ld started) "
           "%.3f ms; bound 10 ms: ratio %.2f and %.2f\n",
           jobs, nodes, best_fill * 1e3, placed, jobs - placed, again, best_steady * 1e3,
           best_fill * 1e3 / 10.0, best_steady * 1e3 / 10.0);
    rc = 0;
out:
    kiln_cluster_free(&c);
    kiln_diag_free(&d);
    free(json);
    free(started);
    free(pl);
    return rc;
}

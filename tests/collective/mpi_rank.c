/* mpi_rank.c - one rank of the MPI backend check; run under mpirun (by
 * mpi_local.sh on this host and mpi_netns.sh across two network namespaces).
 *
 * With TF_CONFIG set (one per rank, as the platform would give), the group
 * comes from it and backend AUTO must pick MPI because the hosts are not all
 * this machine; otherwise backend mpi is asked for and MPI's rank is used.
 * Values are small integers, so sums are exact whatever order MPI adds in. */
#include "kiln/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(int rank, const char *what, kiln_comm *c)
{
    fprintf(stderr, "mpi rank %d: %s: %s\n", rank, what, c ? kiln_comm_error(c) : "");
    return 1;
}

int main(void)
{
    kiln_tf_group g = {0};
    kiln_comm_config cfg = {.rank = -1, .world_size = 0, .backend = KILN_COLL_MPI};
    kiln_comm *c = NULL;
    char err[512];
    const char *tf = getenv("TF_CONFIG");
    int rc = 1, rank = -1, n;
    float *buf = NULL;

    if (tf && *tf) {
        if (kiln_tf_config_parse(tf, &g, err, sizeof err) != KILN_OK) {
            fprintf(stderr, "TF_CONFIG: %s\n", err);
            return 1;
        }
        cfg = kiln_comm_config_from_tf(&g);
    }
    cfg.timeout_s = 30;
    /* hang check (mpi_local.sh): rank 1 stalls before the first collective;
     * rank 0's watchdog must end the job within the short timeout */
    const char *hang = getenv("KILN_TEST_MPI_HANG");
    if (hang && *hang) cfg.timeout_s = 1;
    if (kiln_comm_init(&cfg, &c, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "init: %s\n", err);
        goto out;
    }
    rank = kiln_comm_rank(c);
    n = kiln_comm_world_size(c);
    if (strcmp(kiln_comm_backend_name(c), "mpi") != 0) {
        fprintf(stderr, "rank %d: backend %s, expected mpi\n", rank, kiln_comm_backend_name(c));
        goto out;
    }
    if (hang && *hang) kiln_comm_set_step(c, 7); /* the message names the step */
    if (hang && *hang && rank == 1) sleep(20);
    static const size_t sizes[] = {0, 1, 17, 1000, 262147};
    buf = malloc(262147 * sizeof(float));
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t cnt = sizes[si];
        for (size_t i = 0; i < cnt; i++)
            buf[i] = (float)((i % 251) * (size_t)(rank + 1));
        if (kiln_comm_allreduce_sum_f32(c, buf, cnt) != KILN_OK) {
            rc = fail(rank, "allreduce", c);
            goto out;
        }
        for (size_t i = 0; i < cnt; i++)
            if (buf[i] != (float)((i % 251) * (size_t)(n * (n + 1) / 2))) {
                fprintf(stderr, "rank %d: wrong sum at %zu of %zu\n", rank, i, cnt);
                goto out;
            }
    }
    char msg[64];
    snprintf(msg, sizeof msg, rank == n - 1 ? "from the last rank" : "not this");
    if (kiln_comm_broadcast(c, msg, sizeof msg, n - 1) != KILN_OK ||
        strcmp(msg, "from the last rank") != 0) {
        rc = fail(rank, "broadcast", c);
        goto out;
    }
    int nd = -1, first = -2;
    if (kiln_comm_barrier(c) != KILN_OK ||
        kiln_comm_check_identical(c, buf, 1000 * sizeof(float), &nd, &first) != KILN_OK ||
        nd != 0 || first != -1) {
        rc = fail(rank, "barrier/check_identical", c);
        goto out;
    }
    char host[256] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    printf("mpi rank %d of %d: ok (%s) on host %s\n", rank, n,
           tf && *tf ? "TF_CONFIG, backend auto" : "mpirun", host);
    rc = 0;
out:
    free(buf);
    kiln_comm_destroy(c);
    kiln_tf_group_free(&g);
    return rc;
}

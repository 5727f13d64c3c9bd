/* mpi.c - the many-host backend: OpenMPI's collectives behind kiln's table.
 *
 * Bootstrap: the replicas are started by mpirun (docs/collectives.md shows
 * the command kiln builds from the cluster's host list), so MPI_COMM_WORLD is
 * the group and MPI's rank is authoritative; the cluster's rank and size, when
 * given, must agree with it.
 *
 * Failure: MPI itself has no timeouts. mpirun ends the whole job when one rank
 * dies, so death is bounded already; for hangs a watchdog thread is armed
 * around every call and, past timeout_s, prints which operation on which rank
 * stalled and calls MPI_Abort (the peer that stalled cannot be known from
 * here: MPI does not say who has not arrived). */
#include "collective/coll_int.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mpi_impl {
    MPI_Comm comm;
    int have_comm, we_initialised;
    /* watchdog */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int armed, stop;
    struct timespec deadline;
    char what[96];
    char prefix[32]; /* "step N: " when the caller labelled the step */
    double timeout_s;
    int rank;
} mpi_impl;

static void *watchdog(void *arg)
{
    mpi_impl *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        if (!m->armed) {
            pthread_cond_wait(&m->cv, &m->mu);
            continue;
        }
        struct timespec dl = m->deadline;
        if (pthread_cond_timedwait(&m->cv, &m->mu, &dl) == 0 || !m->armed || m->stop) continue;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec)) {
            fprintf(stderr,
                    "kiln: %smpi %s on rank %d did not complete within %.1f s: a peer hung or "
                    "is not calling the same collective; aborting the job\n",
                    m->prefix, m->what, m->rank, m->timeout_s);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 70);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static void arm(kiln_comm *c, mpi_impl *m)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)c->timeout_s;
    t.tv_nsec += (long)((c->timeout_s - (double)(time_t)c->timeout_s) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&m->mu);
    m->prefix[0] = '\0';
    if (c->step >= 0) snprintf(m->prefix, sizeof m->prefix, "step %lld: ", (long long)c->step);
    snprintf(m->what, sizeof m->what, "%s #%llu", c->op_name, (unsigned long long)c->op_seq);
    m->deadline = t;
    m->armed = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static void disarm(mpi_impl *m)
{
    pthread_mutex_lock(&m->mu);
    m->armed = 0;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static kiln_err mpi_fail(kiln_comm *c, int rc)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    return kiln__comm_fail(c, KILN_EIO, -1, "MPI %s #%llu failed: %.*s", c->op_name,
                           (unsigned long long)c->op_seq, len, s);
}

/* MPI counts are int: large buffers go in pieces. */
#define MPI_PIECE ((size_t)1 << 30)

static kiln_err mpi_allreduce(kiln_comm *c, float *buf, size_t count)
{
    mpi_impl *m = c->impl;
    int rc = MPI_SUCCESS;
    arm(c, m);
    if (count == 0) rc = MPI_Barrier(m->comm);
    for (size_t off = 0; off < count && rc == MPI_SUCCESS; off += MPI_PIECE) {
        size_t n = count - off < MPI_PIECE ? count - off : MPI_PIECE;
        rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, m->comm);
    }
    disarm(m);
    return rc == MPI_SUCCESS ? KILN_OK : mpi_fail(c, rc);
}

static kiln_err mpi_broadcast(kiln_comm *c, void *buf, size_t bytes, int root)
{
    mpi_impl *m = c->impl;
    int rc = MPI_SUCCESS;
    arm(c, m);
    for (size_t off = 0; off < bytes && rc == MPI_SUCCESS; off += MPI_PIECE) {
        size_t n = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        rc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, m->comm);
    }
    disarm(m);
    return rc == MPI_SUCCESS ? KILN_OK : mpi_fail(c, rc);
}

static kiln_err mpi_barrier(kiln_comm *c)
{
    mpi_impl *m = c->impl;
    arm(c, m);
    int rc = MPI_Barrier(m->comm);
    disarm(m);
    return rc == MPI_SUCCESS ? KILN_OK : mpi_fail(c, rc);
}

static kiln_err mpi_init(kiln_comm *c, const kiln_comm_config *cfg)
{
    mpi_impl *m;
    pthread_condattr_t ca;
    int inited = 0, provided = 0, rank = 0, size = 0, rc;

    if (!(m = calloc(1, sizeof *m))) return kiln__comm_fail(c, KILN_ENOMEM, -1, "out of memory");
    c->impl = m;
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    MPI_Initialized(&inited);
    if (!inited) {
        /* SERIALIZED: the caller's thread and kiln's communication thread
         * (non-blocking calls) both make MPI calls, never at the same time
         * (comm.c drains the queue before a blocking call). The watchdog's
         * MPI_Abort is the last thing the process does. */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return kiln__comm_fail(c, KILN_EIO, -1, "MPI_Init_thread failed");
        m->we_initialised = 1;
        if (provided < MPI_THREAD_SERIALIZED)
            return kiln__comm_fail(c, KILN_EIO, -1,
                                   "this MPI library does not allow calls from more than one "
                                   "thread (MPI_THREAD_SERIALIZED)");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (cfg->world_size > 0 && cfg->world_size != size)
        return kiln__comm_fail(c, KILN_EINVAL, -1,
                               "MPI has %d process(es) but the cluster has %d replicas: start "
                               "the replicas under mpirun -np %d (docs/collectives.md)",
                               size, cfg->world_size, cfg->world_size);
    if (cfg->rank >= 0 && cfg->world_size > 0 && cfg->rank != rank)
        return kiln__comm_fail(c, KILN_EINVAL, -1,
                               "MPI rank %d differs from the cluster rank %d: the mpirun host "
                               "order must follow the cluster (chief/master, then workers)",
                               rank, cfg->rank);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm)) != MPI_SUCCESS) return mpi_fail(c, rc);
    m->have_comm = 1;
    /* errors come back as codes, so kiln can word them */
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    c->rank = rank;
    c->world = size;
    m->rank = rank;
    m->timeout_s = c->timeout_s;
    if (pthread_create(&m->thread, NULL, watchdog, m) != 0)
        return kiln__comm_fail(c, KILN_EIO, -1, "cannot start the watchdog thread");
    m->thread_started = 1;
    return KILN_OK;
}

static void mpi_destroy(kiln_comm *c)
{
    mpi_impl *m = c->impl;
    if (!m) return;
    if (m->thread_started) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    if (m->have_comm) MPI_Comm_free(&m->comm);
    if (m->we_initialised) MPI_Finalize();
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
    c->impl = NULL;
}

const kiln__coll_ops kiln__coll_mpi = {
    .name = "mpi",
    .init = mpi_init,
    .allreduce_sum_f32 = mpi_allreduce,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .destroy = mpi_destroy,
};

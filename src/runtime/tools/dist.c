/* tools/dist.c - distribution strategies of kiln-train (see dist.h and
 * docs/distributed.md).
 *
 * One step of a replica: kiln_model_compute_grads writes this replica's
 * share of the gradient (scaled by its fraction of the global batch) into a
 * flat buffer registered with the communicator; every bucket that the
 * backward pass completes is summed over the replicas at once (inline, or
 * queued on the communication thread), the last bucket carrying one extra
 * float: this replica's SIGTERM flag. kiln_model_apply_grads then updates
 * the parameters bucket by bucket with the summed gradients, identical on
 * every replica (the shm sum is bit-identical everywhere), so the replicas
 * stay identical without ever exchanging parameters. */
#include "tools/dist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- strategy and plan ---- */

static const char *const strategy_names[] = {"auto", "one_device", "mirrored",
                                             "multi_worker_mirrored", "parameter_server"};

int dist_strategy_parse(const char *s)
{
    for (int i = 1; i < (int)(sizeof strategy_names / sizeof strategy_names[0]); i++)
        if (strcmp(s, strategy_names[i]) == 0) return i;
    return -1;
}

const char *dist_strategy_name(dist_strategy s)
{
    return strategy_names[s];
}

int dist_plan_make(dist_strategy strategy, int world_size, dist_plan *p)
{
    char err[512];
    memset(p, 0, sizeof *p);
    p->world = 1;
    const char *env = getenv("TF_CONFIG");
    kiln_err e = kiln_tf_config_parse(env, &p->tf, err, sizeof err);
    if (e != KILN_OK && e != KILN_ENOTFOUND) {
        fprintf(stderr, "kiln-train: TF_CONFIG: %s\n", err);
        return 2;
    }
    p->have_tf = e == KILN_OK;
    if (strategy == DIST_AUTO)
        strategy =
            p->have_tf && p->tf.num_ps > 0 ? DIST_PARAMETER_SERVER : DIST_MULTI_WORKER_MIRRORED;
    p->strategy = strategy;
    if (strategy == DIST_PARAMETER_SERVER || (p->have_tf && !strcmp(p->tf.task_type, "ps"))) {
        p->ps = 1;
        return 0;
    }
    if (p->have_tf && !strcmp(p->tf.task_type, "evaluator")) {
        p->evaluator = 1;
        return 0;
    }
    int tf_world = p->have_tf ? p->tf.world_size : 1;
    if (world_size > 1 && tf_world > 1) {
        fprintf(stderr,
                "kiln-train: --world_size=%d and a TF_CONFIG cluster of %d replicas: the "
                "cluster comes from one or the other\n",
                world_size, tf_world);
        return 2;
    }
    if (strategy == DIST_ONE_DEVICE || strategy == DIST_MIRRORED) {
        /* both train on this machine's devices alone; two processes doing so
         * would write the same model dir and train twice */
        int w = world_size > 1 ? world_size : tf_world;
        if (w > 1) {
            fprintf(stderr,
                    "kiln-train: --distribution_strategy=%s trains on one machine, but %s asks "
                    "for %d replicas; use multi_worker_mirrored\n",
                    dist_strategy_name(strategy), world_size > 1 ? "--world_size" : "TF_CONFIG", w);
            return 2;
        }
        return 0;
    }
    if (tf_world > 1) {
        p->world = tf_world;
        p->rank = p->tf.rank;
    } else if (world_size > 1) {
        p->world = world_size;
        p->local = 1;
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        snprintf(p->key, sizeof p->key, "kiln-train-%ld-%llx", (long)getpid(),
                 (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec);
    }
    return 0;
}

void dist_plan_free(dist_plan *p)
{
    if (p->have_tf) kiln_tf_group_free(&p->tf);
    p->have_tf = 0;
}

/* ---- the --world_size launcher ---- */

static volatile sig_atomic_t g_parent_term;

static void parent_on_term(int sig)
{
    (void)sig;
    g_parent_term = 1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

int dist_launch(dist_plan *p)
{
    int n = p->world, rc = 1;
    pid_t parent = getpid(), *pids = calloc((size_t)n, sizeof *pids);
    int *status = calloc((size_t)n, sizeof *status);
    if (!pids || !status) {
        fprintf(stderr, "kiln-train: out of memory\n");
        goto out;
    }
    struct sigaction sa = {0}, old_term, old_int;
    sa.sa_handler = parent_on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
    fflush(stdout);
    fflush(stderr);
    int started = 0;
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "kiln-train: starting replica %d: %s\n", r, strerror(errno));
            break;
        }
        if (pid == 0) {
            /* the child: a replica; it dies with the launcher, whatever kills it */
            sigaction(SIGTERM, &old_term, NULL);
            sigaction(SIGINT, &old_int, NULL);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(1);
            if (r > 0) {
                int fd = open("/dev/null", O_WRONLY);
                if (fd >= 0) {
                    dup2(fd, STDOUT_FILENO);
                    close(fd);
                }
            }
            free(pids);
            free(status);
            p->rank = r;
            return -1;
        }
        pids[r] = pid;
        started++;
    }
    /* wait for all; the first replica to fail on its own stops the others */
    int live = started, cause = -1, forwarded = 0, killed = 0, stopping = started < n;
    double stop_t0 = 0;
    struct timespec t;
    while (live > 0) {
        if (g_parent_term && !forwarded) {
            for (int r = 0; r < started; r++)
                if (pids[r] > 0) kill(pids[r], SIGTERM);
            forwarded = 1;
        }
        if (stopping && !killed) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            double now = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
            if (stop_t0 == 0) {
                stop_t0 = now;
                for (int r = 0; r < started; r++)
                    if (pids[r] > 0) kill(pids[r], SIGTERM);
            } else if (now - stop_t0 > 10.0) { /* a replica that ignores SIGTERM */
                for (int r = 0; r < started; r++)
                    if (pids[r] > 0) kill(pids[r], SIGKILL);
                killed = 1;
            }
        }
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid == 0 || (pid < 0 && errno == EINTR)) {
            sleep_ms(20);
            continue;
        }
        if (pid < 0) break;
        int r = 0;
        while (r < started && pids[r] != pid)
            r++;
        if (r == started) continue;
        pids[r] = -1;
        status[r] = st;
        live--;
        int ok = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 143);
        if (!ok && cause < 0) {
            cause = r;
            stopping = 1;
        }
    }
    /* a replica killed by a signal that we did not send is the likelier
     * cause than one that exited with an error because its peer died */
    for (int r = 0; r < started && !killed; r++)
        if (WIFSIGNALED(status[r]) && r != cause) {
            if (cause < 0 || !WIFSIGNALED(status[cause])) cause = r;
            break;
        }
    if (started < n) {
        rc = 1;
    } else if (cause >= 0) {
        int st = status[cause];
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "kiln-train: replica %d of %d was killed by signal %d (%s)%s\n", cause,
                    n, WTERMSIG(st), strsignal(WTERMSIG(st)), n > 1 ? "; stopped the others" : "");
            rc = 128 + WTERMSIG(st);
        } else {
            fprintf(stderr, "kiln-train: replica %d of %d failed (exit status %d)%s\n", cause, n,
                    WEXITSTATUS(st), n > 1 ? "; stopped the others" : "");
            rc = WEXITSTATUS(st);
        }
    } else {
        rc = 0;
        for (int r = 0; r < n; r++)
            if (WEXITSTATUS(status[r]) == 143) rc = 143;
    }
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    /* the shm backend unlinks its segments once every rank has mapped them;
     * replicas killed before that (SIGKILL while joining) leave them in
     * /dev/shm. Every replica is gone now and the key was this launcher's
     * alone, so remove what may be left (names: src/collective/shm/shm.c) */
    char seg[128];
    snprintf(seg, sizeof seg, "/kiln-coll-%s", p->key);
    shm_unlink(seg);
    for (int i = 0; i < 8; i++) {
        snprintf(seg, sizeof seg, "/kiln-coll-%s-r%d", p->key, i);
        shm_unlink(seg);
    }
out:
    free(pids);
    free(status);
    return rc;
}

/* ---- one replica's gradient sync ---- */

#define MAX_BUCKETS 256

struct dist_ctx {
    kiln_comm *c;
    kiln_model *m;
    kiln_grad_sync sync;
    size_t ngrad;
    int inline_ar, nbuckets;
    kiln_comm_ticket tickets[MAX_BUCKETS];
    volatile sig_atomic_t *term;
    /* $KILN_DIST_PROFILE: seconds spent in the sync callbacks, printed at close */
    int profile, skip_comm; /* skip_comm: $KILN_DIST_PROFILE=nocomm, for measuring only */
    double t_ready, t_wait;
    uint64_t steps;
};

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int on_bucket_ready(void *ud, int b, float *data, size_t count)
{
    dist_ctx *d = ud;
    double t0 = d->profile ? mono_s() : 0;
    if (b == 0) { /* failures name the step being computed (1-based, as logged) */
        kiln_comm_set_step(d->c, (int64_t)kiln_model_step(d->m) + 1);
        d->steps++;
    }
    if (b == d->nbuckets - 1) /* the stop flag rides in the last bucket */
        d->sync.grads[d->ngrad] = *d->term ? 1.0f : 0.0f;
    kiln_err e = d->skip_comm   ? KILN_OK
                 : d->inline_ar ? kiln_comm_allreduce_sum_f32(d->c, data, count)
                                : kiln_comm_iallreduce_sum_f32(d->c, data, count, &d->tickets[b]);
    if (d->profile) d->t_ready += mono_s() - t0;
    return e != KILN_OK;
}

static int on_bucket_wait(void *ud, int b)
{
    dist_ctx *d = ud;
    if (d->inline_ar || d->skip_comm) return 0;
    double t0 = d->profile ? mono_s() : 0;
    kiln_err e = kiln_comm_wait(d->c, d->tickets[b]);
    if (d->profile) d->t_wait += mono_s() - t0;
    return e != KILN_OK;
}

dist_ctx *dist_open(const dist_plan *p, kiln_model *m, size_t bucket_bytes, int inline_ar,
                    volatile sig_atomic_t *term)
{
    char err[512];
    dist_ctx *d = calloc(1, sizeof *d);
    if (!d) {
        fprintf(stderr, "kiln-train: out of memory\n");
        return NULL;
    }
    d->m = m;
    d->term = term;
    const char *pe = getenv("KILN_DIST_PROFILE");
    d->profile = pe && *pe && strcmp(pe, "0") != 0;
    d->skip_comm = pe && strcmp(pe, "nocomm") == 0;
    d->inline_ar = inline_ar;
    kiln_comm_config cfg;
    if (p->have_tf) {
        cfg = kiln_comm_config_from_tf(&p->tf);
    } else {
        cfg = (kiln_comm_config){
            .rank = p->rank, .world_size = p->world, .backend = KILN_COLL_SHM, .job_key = p->key};
    }
    if (kiln_comm_init(&cfg, &d->c, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln-train: replica %d of %d: joining the all-reduce group: %s\n", p->rank,
                p->world, err);
        free(d);
        return NULL;
    }
    d->ngrad = kiln_model_grad_count(m);
    d->nbuckets = kiln_model_grad_buckets(m, bucket_bytes, 1, NULL, NULL, 0);
    if (d->nbuckets > MAX_BUCKETS) {
        fprintf(stderr, "kiln-train: --bucket_bytes=%zu makes %d buckets (at most %d)\n",
                bucket_bytes, d->nbuckets, MAX_BUCKETS);
        goto fail;
    }
    float *g = kiln_comm_alloc_f32(d->c, d->ngrad + 1);
    if (!g) {
        fprintf(stderr, "kiln-train: gradient buffer: %s\n", kiln_comm_error(d->c));
        goto fail;
    }
    d->sync = (kiln_grad_sync){.grads = g,
                               .extra = 1,
                               .bucket_bytes = bucket_bytes,
                               .ud = d,
                               .bucket_ready = on_bucket_ready,
                               .bucket_wait = on_bucket_wait};
    return d;
fail:
    kiln_comm_destroy(d->c);
    free(d);
    return NULL;
}

void dist_close(dist_ctx *d)
{
    if (!d) return;
    if (d->c) kiln_comm_wait_all(d->c); /* nothing may still read the buffer */
    if (d->profile && d->steps)
        fprintf(stderr,
                "kiln-train: replica %d: %llu steps, %d bucket(s): %.3f ms/step in all-reduce "
                "calls (%s), %.3f ms/step waiting before the update\n",
                kiln_comm_rank(d->c), (unsigned long long)d->steps, d->nbuckets,
                1e3 * d->t_ready / (double)d->steps, d->inline_ar ? "inline" : "queued",
                1e3 * d->t_wait / (double)d->steps);
    kiln_comm_free(d->c, d->sync.grads);
    kiln_comm_destroy(d->c);
    free(d);
}

const kiln_grad_sync *dist_sync(dist_ctx *d)
{
    return &d->sync;
}

int dist_stop_requested(const dist_ctx *d)
{
    return d->sync.grads[d->ngrad] > 0.5f;
}

int dist_one_host(const dist_ctx *d)
{
    return strcmp(kiln_comm_backend_name(d->c), "shm") == 0;
}

const char *dist_error(const dist_ctx *d)
{
    return kiln_comm_error(d->c);
}

static int comm_failed(dist_ctx *d, const char *what)
{
    fprintf(stderr, "kiln-train: replica %d: %s: %s\n", kiln_comm_rank(d->c), what,
            kiln_comm_error(d->c));
    return -1;
}

int dist_share_state(dist_ctx *d, kiln_model *m, int *status, run_pos *pos, const char *cfg)
{
    int nd = 0, first = -1;
    /* every replica must run the same model with the same flags */
    if (kiln_comm_check_identical(d->c, cfg, strlen(cfg), &nd, &first) != KILN_OK)
        return comm_failed(d, "comparing flags with the chief");
    if (nd > 0) {
        fprintf(stderr,
                "kiln-train: replica %d runs with other flags than the chief (rank 0); "
                "this one has: %s\n",
                first, cfg);
        return -1;
    }
    int64_t hdr[5] = {*status, (int64_t)pos->epoch, (int64_t)pos->step_in_epoch,
                      (int64_t)pos->shuffle_seed, (int64_t)kiln_model_step(m)};
    if (kiln_comm_broadcast(d->c, hdr, sizeof hdr, 0) != KILN_OK)
        return comm_failed(d, "receiving the chief's state");
    *status = (int)hdr[0];
    if (*status < 0) {
        if (kiln_comm_rank(d->c) != 0)
            fprintf(stderr, "kiln-train: the chief (rank 0) could not restore its checkpoint\n");
        return -1;
    }
    pos->epoch = (uint64_t)hdr[1];
    pos->step_in_epoch = (uint64_t)hdr[2];
    pos->shuffle_seed = (uint64_t)hdr[3];
    kiln_model_set_step(m, (uint64_t)hdr[4]);
    for (size_t i = 0; i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        if (kiln_comm_broadcast(d->c, b.data, b.size * sizeof(float), 0) != KILN_OK)
            return comm_failed(d, "receiving the chief's parameters");
    }
    uint8_t rng[KILN_RNG_STATE_SIZE];
    kiln_rng_encode(kiln_model_rng(m), rng);
    if (kiln_comm_broadcast(d->c, rng, sizeof rng, 0) != KILN_OK)
        return comm_failed(d, "receiving the chief's state");
    kiln_rng_decode(kiln_model_rng(m), rng);
    return 0;
}

int dist_check_identical(dist_ctx *d, kiln_model *m)
{
    for (size_t i = 0; i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        if (!b.is_param) continue;
        int nd = 0, first = -1;
        if (kiln_comm_check_identical(d->c, b.data, b.size * sizeof(float), &nd, &first) !=
            KILN_OK) {
            comm_failed(d, "checking that the replicas are identical");
            return -1;
        }
        if (nd > 0) {
            fprintf(stderr,
                    "kiln-train: replicas diverged after step %llu: rank %d's %s differs from "
                    "rank 0's (%d replica%s)\n",
                    (unsigned long long)kiln_model_step(m), first, b.name, nd,
                    nd > 1 ? "s differ" : " differs");
            return 1;
        }
    }
    return 0;
}

int dist_sum(dist_ctx *d, double *v, int n)
{
    float f[8];
    if (n > 8) return -1;
    /* float is plenty for logged epoch statistics */
    for (int i = 0; i < n; i++)
        f[i] = (float)v[i];
    if (kiln_comm_allreduce_sum_f32(d->c, f, (size_t)n) != KILN_OK)
        return comm_failed(d, "summing epoch statistics");
    for (int i = 0; i < n; i++)
        v[i] = f[i];
    return 0;
}

/* ---- the parameter_server hook's default ---- */

__attribute__((weak)) int kiln_train_ps_main(const struct kiln_tf_group *tf, const kt_opts *o)
{
    (void)tf;
    (void)o;
    fprintf(stderr, "kiln-train: the parameter_server strategy is not built in\n");
    return 2;
}

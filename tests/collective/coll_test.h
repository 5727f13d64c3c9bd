/* coll_test.h - helpers for the collective tests: run N ranks as forked
 * processes and collect what each saw through an anonymous shared mapping.
 * Children report through the mapping and their exit code; only the parent
 * uses CHECK. */
#ifndef KILN_COLL_TEST_H
#define KILN_COLL_TEST_H

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln/collective.h"

#define CT_MAX_RANKS 8

typedef struct ct_result {
    int err;          /* kiln_err of the operation under test */
    int failed_peer;  /* kiln_comm_failed_peer */
    double elapsed_s; /* how long the operation under test took */
    char msg[512];
} ct_result;

static inline double ct_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Memory every forked rank can write and the parent read afterwards. */
static inline void *ct_shared(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    memset(p, 0, bytes);
    return p;
}

/* A key unique to this test process and call. */
static inline void ct_key(char *buf, size_t n, const char *what)
{
    static int seq;
    snprintf(buf, n, "t-%s-%d-%d", what, (int)getpid(), seq++);
}

typedef int (*ct_rank_fn)(int rank, int world, void *arg);

/* Forks `world` ranks running fn; waits for all (killing stragglers after
 * guard_s); returns the exit statuses (waitpid format) in status[]. pids[]
 * (may be NULL) receives the children, for tests that kill one. */
static inline void ct_run(int world, ct_rank_fn fn, void *arg, double guard_s, int *status)
{
    pid_t pids[CT_MAX_RANKS];
    int done[CT_MAX_RANKS] = {0};
    double t0 = ct_now();

    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = fn(r, world, arg);
            fflush(stdout);
            exit(rc); /* exit, not _exit: LeakSanitizer checks every rank */
        }
    }
    for (int left = world; left > 0;) {
        for (int r = 0; r < world; r++) {
            if (done[r]) continue;
            pid_t p = waitpid(pids[r], &status[r], WNOHANG);
            if (p == pids[r]) {
                done[r] = 1;
                left--;
            }
        }
        if (left && ct_now() - t0 > guard_s) {
            for (int r = 0; r < world; r++)
                if (!done[r]) {
                    fprintf(stderr, "ct_run: rank %d still running after %.0f s: killing it\n", r,
                            guard_s);
                    kill(pids[r], SIGKILL);
                }
            guard_s = 1e9;
        }
        if (left) usleep(2000);
    }
}

static inline int ct_exited_ok(int st)
{
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Does /dev/shm hold a segment for this key? */
static inline int ct_segment_exists(const char *key)
{
    char path[256];
    snprintf(path, sizeof path, "/dev/shm/kiln-coll-%s", key);
    return access(path, F_OK) == 0;
}

/* Count of /dev/shm entries whose name starts with the prefix. */
static inline int ct_segments_with_prefix(const char *prefix)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = 0;
    if (!d) return 0;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

#endif

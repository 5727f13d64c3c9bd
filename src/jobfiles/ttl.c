/* src/jobfiles/ttl.c - runPolicy.ttlSecondsAfterFinished: a finished job's
 * files are cleaned once the TTL has passed (issue 16).
 *
 * What goes: everything under DATA/jobs/P/J except log.tsv (the job's log:
 * service events and replica output, what `kiln jobs stream-logs` reads)
 * and metrics.jsonl (the training metrics history): the replicas' own
 * files (replicas/: raw logs, monitor state, metrics), the staged packages
 * (staging/), the run directory (work/, a trial's N/), ps keys. The job
 * record stays in the store; Kubernetes would delete the whole TFJob, kiln
 * keeps the record and its log so that `kiln jobs describe` still answers.
 *
 * Durable and cheap with a large store: a job with a TTL gets a marker
 * DATA/ttl/P/J, written and fsynced before the job is stored (so a crash
 * between the two leaves at worst a marker without a job, dropped at the
 * next look), removed once it is cleaned (or gone).
 * The supervisor thread reads the markers once at start, learns new ones
 * from the API in memory, and once a second looks only at those jobs: the
 * unfinished ones by their state (one indexed read each), the finished ones
 * in a min-heap by due time (endTime + TTL, from the store: a restart of
 * kilnd changes nothing). Jobs without a TTL are never looked at. The lists
 * live in the jobfiles handle (jobfiles_int.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobfiles/jobfiles_int.h"
#include "kiln/store.h"

typedef kiln__tjob tjob;
typedef kiln__tvec tvec;

static bool push(tvec *t, const char *project, const char *job_id, int64_t due)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        tjob *v = realloc(t->v, cap * sizeof *v);
        if (!v) return false;
        t->v = v;
        t->cap = cap;
    }
    tjob e = {.project = strdup(project), .job_id = strdup(job_id), .due_ns = due};
    if (!e.project || !e.job_id) {
        free(e.project);
        free(e.job_id);
        return false;
    }
    t->v[t->n++] = e;
    return true;
}

static void heap_push(tvec *h, tjob e)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 16;
        tjob *v = realloc(h->v, cap * sizeof *v);
        if (!v) { /* kept as a marker: the next kilnd cleans it */
            free(e.project);
            free(e.job_id);
            return;
        }
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && h->v[(i - 1) / 2].due_ns > e.due_ns) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = e;
}

static tjob heap_pop(tvec *h)
{
    tjob top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->v[c + 1].due_ns < h->v[c].due_ns) c++;
        if (h->v[c].due_ns >= last.due_ns) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static void marker_path(const kiln_jobfiles *jf, const char *project, const char *job_id, char *buf,
                        size_t len)
{
    snprintf(buf, len, "%s/ttl/%s/%s", jf->data_dir, project, job_id);
}

static void marker_remove(const kiln_jobfiles *jf, const char *project, const char *job_id)
{
    char p[PATH_MAX];
    marker_path(jf, project, job_id, p, sizeof p);
    unlink(p);
}

int kiln_jobfiles_ttl_mark(const kiln_jobfiles *jf, const char *project, const char *job_id)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/ttl/%s", jf->data_dir, project);
    if (kilnd_mkdirs(p) < 0) return -1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", p);
    marker_path(jf, project, job_id, p, sizeof p);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return errno == EEXIST ? 0 : -1;
    /* durable before the job is: its directory entry too */
    int ok = fsync(fd) == 0;
    close(fd);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ok = ok && fsync(dfd) == 0;
        close(dfd);
    }
    if (!ok) {
        unlink(p);
        return -1;
    }
    return 1;
}

void kiln_jobfiles_ttl_unmark(const kiln_jobfiles *jf, const char *project, const char *job_id)
{
    marker_remove(jf, project, job_id);
}

void kiln_jobfiles_ttl_created(kiln_jobfiles *jf, const char *project, const char *job_id)
{
    pthread_mutex_lock(&jf->ttl_mu);
    push(&jf->ttl_new, project, job_id, 0);
    pthread_mutex_unlock(&jf->ttl_mu);
}

/* The markers a previous kilnd left: DATA/ttl/P/J. */
static void load_markers(kiln_jobfiles *jf)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/ttl", jf->data_dir);
    DIR *top = opendir(p);
    if (!top) return;
    struct dirent *pe;
    while ((pe = readdir(top))) {
        if (pe->d_name[0] == '.') continue;
        char pd[PATH_MAX + 256];
        snprintf(pd, sizeof pd, "%s/%s", p, pe->d_name);
        DIR *dd = opendir(pd);
        if (!dd) continue;
        struct dirent *je;
        while ((je = readdir(dd)))
            if (je->d_name[0] != '.') push(&jf->ttl_watch, pe->d_name, je->d_name, 0);
        closedir(dd);
    }
    closedir(top);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Removes DATA/jobs/P/J's contents but its log and metrics history. */
static int clean_dir(const char *dir, int *removed)
{
    DIR *dd = opendir(dir);
    if (!dd) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strcmp(e->d_name, "log.tsv") == 0 || strcmp(e->d_name, "metrics.jsonl") == 0)
            continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
        nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        (*removed)++;
    }
    closedir(dd);
    return 0;
}

static void clean(kiln_jobfiles *jf, tjob *e)
{
    kiln_job_record *r = NULL;
    if (kiln_store_job_get(jf->store, e->project, e->job_id, &r) == KILN_OK) {
        char dir[PATH_MAX];
        int removed = 0;
        kiln_jobfiles_dir(jf, e->project, e->job_id, dir, sizeof dir);
        const kiln_run_policy *rp = &r->job->training_input.run_policy;
        if (clean_dir(dir, &removed) == 0)
            kiln_jobfiles_event(
                jf, e->project, e->job_id, "INFO",
                "cleaned after ttlSecondsAfterFinished=%lld: removed the replicas' files, "
                "staged packages and run directories (%d entr%s); the job record, its log "
                "and metrics stay",
                (long long)rp->ttl_seconds_after_finished, removed, removed == 1 ? "y" : "ies");
    }
    kiln_job_record_free(r);
    marker_remove(jf, e->project, e->job_id);
}

static void drop(tjob *e)
{
    free(e->project);
    free(e->job_id);
}

void kiln_jobfiles_ttl_tick(kiln_jobfiles *jf, int64_t now)
{
    if (!jf->ttl_loaded) {
        load_markers(jf);
        jf->ttl_loaded = true;
    }
    pthread_mutex_lock(&jf->ttl_mu);
    for (size_t i = 0; i < jf->ttl_new.n; i++) {
        if (!push(&jf->ttl_watch, jf->ttl_new.v[i].project, jf->ttl_new.v[i].job_id, 0)) break;
        drop(&jf->ttl_new.v[i]);
        jf->ttl_new.v[i].project = jf->ttl_new.v[i].job_id = NULL;
    }
    for (size_t i = 0; i < jf->ttl_new.n; i++) /* the rest, when out of memory */
        drop(&jf->ttl_new.v[i]);
    jf->ttl_new.n = 0;
    pthread_mutex_unlock(&jf->ttl_mu);
    if (now < jf->ttl_next) return;
    jf->ttl_next = now + 1000000000LL; /* once a second */
    /* the unfinished: one indexed read each */
    for (size_t i = 0; i < jf->ttl_watch.n;) {
        tjob *e = &jf->ttl_watch.v[i];
        int64_t seq, version;
        kiln_job_state st;
        kiln_err err =
            kiln_store_job_version(jf->store, e->project, e->job_id, &seq, &version, &st);
        bool done = false;
        if (err == KILN_ENOTFOUND) {
            marker_remove(jf, e->project, e->job_id);
            done = true;
        } else if (err == KILN_OK && (KILN_STATES_TERMINAL & (1u << st))) {
            kiln_job_record *r = NULL;
            if (kiln_store_job_get(jf->store, e->project, e->job_id, &r) == KILN_OK) {
                const kiln_training_input *ti = &r->job->training_input;
                if (ti->has_run_policy && ti->run_policy.has_ttl_seconds_after_finished) {
                    heap_push(
                        &jf->ttl_heap,
                        (tjob){.project = e->project,
                               .job_id = e->job_id,
                               .due_ns = r->end_ns +
                                         ti->run_policy.ttl_seconds_after_finished * 1000000000LL});
                    e->project = e->job_id = NULL;
                } else {
                    marker_remove(jf, e->project, e->job_id);
                }
                done = true;
            }
            kiln_job_record_free(r);
        }
        if (!done) {
            i++;
            continue;
        }
        drop(e);
        jf->ttl_watch.v[i] = jf->ttl_watch.v[--jf->ttl_watch.n];
    }
    /* the finished whose time has come */
    while (jf->ttl_heap.n && jf->ttl_heap.v[0].due_ns <= now && !(jf->stop && *jf->stop)) {
        tjob e = heap_pop(&jf->ttl_heap);
        clean(jf, &e);
        drop(&e);
    }
}

void kiln__jobfiles_ttl_free(kiln_jobfiles *jf)
{
    tvec *lists[] = {&jf->ttl_new, &jf->ttl_watch, &jf->ttl_heap};
    for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
        for (size_t i = 0; i < lists[l]->n; i++)
            drop(&lists[l]->v[i]);
        free(lists[l]->v);
        *lists[l] = (tvec){0};
    }
}

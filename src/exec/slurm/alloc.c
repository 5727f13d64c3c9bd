/* src/exec/slurm/alloc.c - Slurm allocations and steps (alloc.h): the
 * plumbing of the Slurm placement and launch backend, through Slurm's own
 * commands. Nothing here decides what happens to a job. */
#include "exec/slurm/alloc.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/slurm/slurm.h" /* kiln_slurm_run */
#include "util/atomic.h"

#define CMD_TIMEOUT_S 30

void kiln_slurm_last_line(const char *out, char *buf, size_t len)
{
    buf[0] = '\0';
    if (!out) return;
    size_t n = strlen(out);
    while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
        n--;
    size_t s = n;
    while (s && out[s - 1] != '\n')
        s--;
    snprintf(buf, len, "%.*s", (int)(n - s), out + s);
}

kiln_err kiln_slurm_alloc_submit(const kiln_slurm_alloc_req *rq, long *id, char *why, size_t whylen)
{
    char script[PATH_MAX], out[PATH_MAX], buf[256];
    char *sbout = NULL, *text = NULL;
    size_t tlen = 0;
    FILE *f = NULL;
    kiln_err err = KILN_EIO;
    *id = 0;
    if (rq->n == 0) {
        snprintf(why, whylen, "an allocation of no replicas");
        return KILN_EINVAL;
    }
    snprintf(script, sizeof script, "%s/%s.sh", rq->dir, rq->name);
    snprintf(out, sizeof out, "%s/%s-%%j.out", rq->dir, rq->name);
    /* the script: one component per replica, then a body that only waits
     * (the replicas are steps srun starts into it; scancel ends it) */
    f = open_memstream(&text, &tlen);
    if (!f) goto nomem;
    fprintf(f, "#!/bin/sh\n# kilnd: an allocation for the replicas of one kiln gang, a component\n"
               "# per role; each replica runs in it as a step (srun --jobid --het-group).\n");
    for (size_t k = 0; k < rq->n; k++) {
        const kiln_slurm_comp *c = &rq->comps[k];
        if (k) fprintf(f, "#SBATCH hetjob\n");
        fprintf(f, "#SBATCH --ntasks=%d", c->tasks);
        if (c->cpus > 0) fprintf(f, " --cpus-per-task=%d", c->cpus);
        if (c->mem_mb > 0)
            fprintf(f, " --mem-per-cpu=%ldM",
                    (c->mem_mb + (c->cpus > 0 ? c->cpus : 1) - 1) / (c->cpus > 0 ? c->cpus : 1));
        if (c->gpus > 0)
            fprintf(f, " --gpus-per-task=%s%s%d", c->gres ? c->gres : "", c->gres ? ":" : "",
                    c->gpus);
        if (c->node) fprintf(f, " --nodes=1 --nodelist=%s", c->node);
        fprintf(f, "\n");
    }
    /* the layout: where Slurm put each component's tasks, written once
     * (kilnd reads it when the allocation runs), then only a wait */
    fprintf(f, "set -e\nL=\"%s/layout.$SLURM_JOB_ID\"\n{\n", rq->dir);
    for (size_t k = 0; k < rq->n; k++) {
        const char *sfx = rq->n > 1 ? "_HET_GROUP_" : "";
        char num[24] = "";
        if (rq->n > 1) snprintf(num, sizeof num, "%zu", k);
        fprintf(f,
                "  printf '%%s %%s' %zu \"$SLURM_TASKS_PER_NODE%s%s\"\n"
                "  for h in $(scontrol show hostnames \"$SLURM_JOB_NODELIST%s%s\"); do "
                "printf ' %%s' \"$h\"; done\n  echo\n",
                k, sfx, num, sfx, num);
    }
    fprintf(f, "} >\"$L.tmp\"\nmv \"$L.tmp\" \"$L\"\nexec sleep 2147483647\n");
    if (fclose(f) != 0) {
        f = NULL;
        goto nomem;
    }
    f = NULL;
    if (kiln__write_atomic(script, text, tlen, 0755) != 0) {
        snprintf(why, whylen, "cannot write %s: %s", script, strerror(errno));
        goto out;
    }
    if (rq->uid >= 0 && chown(script, (uid_t)rq->uid, (gid_t)rq->gid) < 0) {
        /* sbatch reads it as root; the owner is only for the user's eyes */
    }
    char jn[256], part[256], acct[256], qos[256], uid[64], gid[64], tl[64], nc[48], o[PATH_MAX + 8];
    if (snprintf(jn, sizeof jn, "--job-name=%s", rq->name) >= (int)sizeof jn ||
        snprintf(part, sizeof part, "--partition=%s", rq->partition) >= (int)sizeof part ||
        snprintf(o, sizeof o, "--output=%.*s", PATH_MAX - 1, out) >= (int)sizeof o) {
        snprintf(why, whylen, "a job name, partition or directory too long for sbatch");
        err = KILN_EINVAL;
        goto out;
    }
    char *argv[16];
    size_t a = 0;
    argv[a++] = "sbatch";
    argv[a++] = "--parsable";
    argv[a++] = jn;
    argv[a++] = part;
    argv[a++] = o;
    argv[a++] = "--chdir=/";
    if (rq->account) {
        snprintf(acct, sizeof acct, "--account=%s", rq->account);
        argv[a++] = acct;
    }
    if (rq->qos) {
        snprintf(qos, sizeof qos, "--qos=%s", rq->qos);
        argv[a++] = qos;
    }
    if (rq->uid >= 0) {
        snprintf(uid, sizeof uid, "--uid=%ld", rq->uid);
        snprintf(gid, sizeof gid, "--gid=%ld", rq->gid);
        argv[a++] = uid;
        argv[a++] = gid;
    }
    if (rq->nice >= 0) {
        snprintf(nc, sizeof nc, "--nice=%d", rq->nice);
        argv[a++] = nc;
    }
    if (rq->time_limit_s > 0) {
        long m = (rq->time_limit_s + 59) / 60;
        snprintf(tl, sizeof tl, "--time=%ld", m);
        argv[a++] = tl;
    }
    argv[a++] = script;
    argv[a] = NULL;
    int rc = kiln_slurm_run(argv, &sbout, CMD_TIMEOUT_S);
    if (rc != 0) {
        kiln_slurm_last_line(sbout, buf, sizeof buf);
        snprintf(why, whylen, "sbatch: %s", *buf ? buf : "failed");
        /* what no waiting changes: Slurm's "can never run" answers */
        if (strstr(buf, "Requested node configuration is not available") ||
            strstr(buf, "Invalid generic resource") || strstr(buf, "Invalid partition") ||
            strstr(buf, "Node count specification invalid") ||
            strstr(buf, "More processors requested than permitted"))
            err = KILN_EINVAL;
        goto out;
    }
    /* --parsable: "ID" or "ID;CLUSTER" */
    char *end = NULL;
    long v = sbout ? strtol(sbout, &end, 10) : 0;
    if (v <= 0 || !end || (*end && *end != ';' && *end != '\n')) {
        kiln_slurm_last_line(sbout, buf, sizeof buf);
        snprintf(why, whylen, "sbatch answered '%s', not a job id", buf);
        goto out;
    }
    *id = v;
    err = KILN_OK;
    goto out;
nomem:
    snprintf(why, whylen, "out of memory");
    err = KILN_ENOMEM;
out:
    if (f) fclose(f);
    free(text);
    free(sbout);
    return err;
}

void kiln_slurm_alloc_list_free(kiln_slurm_alloc_list *l)
{
    free(l->rows);
    *l = (kiln_slurm_alloc_list){0};
}

/* A node name as Slurm prints one (no hostlist brackets, no spaces). */
static bool node_name_ok(const char *n)
{
    size_t l = strlen(n);
    if (l == 0 || l >= sizeof(kiln_slurm_node_name)) return false;
    for (const char *p = n; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') return false;
    return true;
}

void kiln_slurm_alloc_list_read(const char *prefix, kiln_slurm_alloc_list *out)
{
    *out = (kiln_slurm_alloc_list){0};
    /* %i: "ID" or, for a heterogeneous job's component K, "ID+K" (%F is
     * each component's own id); %D|%N: its node count and nodes */
    char *argv[] = {"squeue", "--noheader", "--all", "--format=%i|%T|%r|%j|%D|%N", NULL};
    char *text = NULL;
    if (kiln_slurm_run(argv, &text, CMD_TIMEOUT_S) != 0) {
        free(text);
        return;
    }
    out->ok = true;
    size_t pl = strlen(prefix);
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        char *f[6] = {0}, *p = ln;
        for (int k = 0; k < 6 && p; k++) {
            f[k] = p;
            p = k < 5 ? strchr(p, '|') : NULL;
            if (p) *p++ = '\0';
        }
        if (!f[3] || strncmp(f[3], prefix, pl) != 0) continue;
        char *e = NULL;
        long id = strtol(f[0], &e, 10), comp = 0;
        if (id <= 0 || e == f[0]) continue;
        if (*e == '+') {
            char *e2 = NULL;
            comp = strtol(e + 1, &e2, 10);
            if (e2 == e + 1 || *e2 || comp < 0) continue;
        } else if (*e) {
            continue; /* an array task ("ID_N"): not kiln's */
        }
        kiln_slurm_alloc_row *r = (kiln_slurm_alloc_row *)kiln_slurm_alloc_find(out, id, NULL);
        if (r && strcmp(r->name, f[3]) != 0) continue; /* one id, two names: not Slurm's answer */
        if (!r) {
            kiln_slurm_alloc_row *nr = realloc(out->rows, (out->n + 1) * sizeof *nr);
            if (!nr) {
                out->ok = false; /* not all known: act as if squeue had failed */
                break;
            }
            out->rows = nr;
            r = &out->rows[out->n++];
            *r = (kiln_slurm_alloc_row){.id = id};
            snprintf(r->state, sizeof r->state, "%s", f[1]);
            snprintf(r->reason, sizeof r->reason, "%s", f[2]);
            snprintf(r->name, sizeof r->name, "%s", f[3]);
        }
        if (comp < KILN_SLURM_COMPS && f[5] && strcmp(f[4], "1") == 0 && node_name_ok(f[5]) &&
            !(r->one_node >> comp & 1)) {
            snprintf(r->comp_node[comp], sizeof r->comp_node[comp], "%s", f[5]);
            r->one_node |= 1u << comp;
        }
    }
    free(text);
}

kiln_err kiln_slurm_alloc_layout_row(const kiln_slurm_alloc_row *r, const kiln_slurm_comp *comps,
                                     size_t n, kiln_slurm_node_name *const nodes[])
{
    if (!r || n > KILN_SLURM_COMPS || kiln_slurm_alloc_state_of(r) != KILN_SLURM_ALLOC_RUNNING)
        return KILN_ECONFLICT;
    for (size_t k = 0; k < n; k++)
        if (!(r->one_node >> k & 1)) return KILN_ECONFLICT;
    for (size_t k = 0; k < n; k++)
        for (int t = 0; t < comps[k].tasks; t++)
            snprintf(nodes[k][t], sizeof nodes[k][t], "%s", r->comp_node[k]);
    return KILN_OK;
}

const kiln_slurm_alloc_row *kiln_slurm_alloc_find(const kiln_slurm_alloc_list *l, long id,
                                                  const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if ((id > 0 && l->rows[i].id == id) || (name && strcmp(l->rows[i].name, name) == 0))
            return &l->rows[i];
    return NULL;
}

kiln_slurm_alloc_state kiln_slurm_alloc_state_of(const kiln_slurm_alloc_row *r)
{
    if (!r) return KILN_SLURM_ALLOC_ENDED;
    if (strcmp(r->state, "RUNNING") == 0) return KILN_SLURM_ALLOC_RUNNING;
    if (strcmp(r->state, "PENDING") == 0 || strcmp(r->state, "CONFIGURING") == 0 ||
        strcmp(r->state, "REQUEUED") == 0 || strcmp(r->state, "REQUEUE_HOLD") == 0 ||
        strcmp(r->state, "RESV_DEL_HOLD") == 0 || strcmp(r->state, "SUSPENDED") == 0)
        return KILN_SLURM_ALLOC_PENDING;
    return KILN_SLURM_ALLOC_ENDED; /* COMPLETING, CANCELLED, FAILED, TIMEOUT, NODE_FAIL ... */
}

/* SLURM_TASKS_PER_NODE "2(x3),1" -> 2 2 2 1 into per[] (at most max nodes). */
static int tasks_per_node(const char *s, int *per, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        char *e;
        long t = strtol(s, &e, 10), rep = 1;
        /* no node holds more replicas than a job may have */
        if (e == s || t < 0 || t > KILN_MAX_REPLICAS) return -1;
        if (strncmp(e, "(x", 2) == 0) {
            rep = strtol(e + 2, &e, 10);
            if (*e != ')' || rep <= 0) return -1;
            e++;
        }
        for (long r = 0; r < rep && n < max; r++)
            per[n++] = (int)t;
        if (*e != ',' && *e != '\0') return -1;
        s = *e == ',' ? e + 1 : e;
    }
    return n;
}

kiln_err kiln_slurm_alloc_layout_parse(const char *text, const kiln_slurm_comp *comps, size_t n,
                                       kiln_slurm_node_name *const nodes[])
{
    kiln_err err = n <= 64 ? KILN_OK : KILN_EIO;
    size_t seen = 0;
    uint64_t got = 0; /* the components whose line was read */
    char line[8192];
    const char *p = text;
    while (err == KILN_OK && *p) {
        size_t ll = strcspn(p, "\n");
        if (ll >= sizeof line) return KILN_EIO;
        memcpy(line, p, ll);
        line[ll] = '\0';
        p += ll + (p[ll] == '\n');
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        char *end = NULL;
        unsigned long k = tok ? strtoul(tok, &end, 10) : 0;
        char *tpn = strtok_r(NULL, " ", &save);
        if (!tok || !end || *end || k >= n || !tpn || (got >> k & 1)) {
            err = KILN_EIO;
            break;
        }
        int per[256];
        int nn = tasks_per_node(tpn, per, 256), t = 0;
        for (int i = 0; err == KILN_OK && i < nn; i++) {
            char *host = strtok_r(NULL, " ", &save);
            if (!host || strlen(host) >= sizeof nodes[k][0]) err = KILN_EIO;
            for (int q = 0; err == KILN_OK && q < per[i]; q++, t++) {
                if (t >= comps[k].tasks) { /* more tasks than asked for */
                    err = KILN_EIO;
                    break;
                }
                snprintf(nodes[k][t], sizeof nodes[k][t], "%s", host);
            }
        }
        if (nn < 0 || t != comps[k].tasks || strtok_r(NULL, " ", &save)) err = KILN_EIO;
        got |= 1ull << k;
        seen++;
    }
    if (err == KILN_OK && seen != n) err = KILN_EIO;
    return err;
}

kiln_err kiln_slurm_alloc_layout(const char *dir, long id, const kiln_slurm_comp *comps, size_t n,
                                 kiln_slurm_node_name *const nodes[], char *why, size_t whylen)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/layout.%ld", dir, id);
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(why, whylen, "Slurm job %ld runs; its batch script has not written %s yet", id,
                 path);
        return KILN_ECONFLICT;
    }
    /* a few lines of node names: a bound, not a read of whatever is there */
    char text[65536];
    size_t len = fread(text, 1, sizeof text - 1, f);
    bool more = fgetc(f) != EOF;
    fclose(f);
    text[len] = '\0';
    kiln_err err = more || strlen(text) != len
                       ? KILN_EIO
                       : kiln_slurm_alloc_layout_parse(text, comps, n, nodes);
    if (err != KILN_OK)
        snprintf(why, whylen, "%s: not the layout of the %zu components kilnd asked for", path, n);
    return err;
}

bool kiln_slurm_alloc_ended(long id, char *state, size_t slen)
{
    char ids[48], *text = NULL;
    snprintf(ids, sizeof ids, "--jobs=%ld", id);
    /* every state: an ended allocation is listed (MinJobAge) with how it ended */
    char *argv[] = {"squeue", "--noheader", "--states=all", ids, "--format=%T", NULL};
    state[0] = '\0';
    int rc = kiln_slurm_run(argv, &text, CMD_TIMEOUT_S);
    /* squeue answers an id it no longer knows with an error */
    bool unknown = text && strstr(text, "Invalid job id");
    if (rc != 0 && !unknown) {
        free(text);
        return false;
    }
    if (!unknown && text) sscanf(text, "%31s", state);
    free(text);
    kiln_slurm_alloc_row r = {.id = id};
    snprintf(r.state, sizeof r.state, "%s", state);
    return !state[0] || kiln_slurm_alloc_state_of(&r) == KILN_SLURM_ALLOC_ENDED;
}

kiln_slurm_end kiln_slurm_end_of(const char *state)
{
    static const char *const exited[] = {"COMPLETED", "FAILED", "OUT_OF_MEMORY"};
    char w[32] = "";
    if (!state || sscanf(state, "%31[A-Z_]", w) != 1) return KILN_SLURM_END_TAKEN;
    if (strcmp(w, "RUNNING") == 0) return KILN_SLURM_END_RUNNING;
    for (size_t i = 0; i < sizeof exited / sizeof *exited; i++)
        if (strcmp(w, exited[i]) == 0) return KILN_SLURM_END_EXITED;
    /* COMPLETING: kilnd's own scancel or the script's end, not known yet;
     * anything else is Slurm's doing (and PENDING again its requeue) */
    return KILN_SLURM_END_TAKEN;
}

kiln_slurm_end kiln_slurm_alloc_end(long id, char *state, size_t slen, char *exit_code, size_t elen)
{
    char ids[48], *text = NULL;
    exit_code[0] = '\0';
    kiln_slurm_alloc_ended(id, state, slen);
    /* COMPLETING (its steps being killed) comes before the state that
     * says why: a requeue's PENDING, the script's FAILED. Bounded: 3 s,
     * then sacct, then "taken" */
    for (int i = 0; i < 15 && strcmp(state, "COMPLETING") == 0; i++) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        kiln_slurm_alloc_ended(id, state, slen);
    }
    /* COMPLETING says the script ended but not how: sacct does */
    if (state[0] && strcmp(state, "COMPLETING") != 0) return kiln_slurm_end_of(state);
    snprintf(ids, sizeof ids, "--jobs=%ld", id);
    char *argv[] = {
        "sacct", "--noheader", "--parsable2", "--allocations", ids, "--format=State,ExitCode",
        NULL};
    char st[64] = "", ec[16] = "";
    if (kiln_slurm_run(argv, &text, CMD_TIMEOUT_S) == 0 && text &&
        sscanf(text, "%63[^|\n]|%15[0-9:]", st, ec) >= 1) {
        snprintf(state, slen, "%s", st);
        snprintf(exit_code, elen, "%s", ec);
    }
    free(text);
    return kiln_slurm_end_of(state[0] ? state : NULL);
}

void kiln_slurm_alloc_cancel(long id)
{
    char ids[32], *out = NULL;
    snprintf(ids, sizeof ids, "%ld", id);
    char *argv[] = {"scancel", ids, NULL};
    kiln_slurm_run(argv, &out, CMD_TIMEOUT_S);
    free(out);
}

kiln_err kiln_slurm_step_argv(long id, int het, const char *node, int gpus, int cpus,
                              const char *step, kiln_strv *av)
{
    char j[48], h[48], nl[96], g[48], c[48], *n = NULL;
    snprintf(j, sizeof j, "--jobid=%ld", id);
    snprintf(h, sizeof h, "--het-group=%d", het);
    snprintf(nl, sizeof nl, "--nodelist=%s", node);
    snprintf(g, sizeof g, "--gpus-per-task=%d", gpus);
    snprintf(c, sizeof c, "--cpus-per-task=%d", cpus);
    if (asprintf(&n, "--job-name=%s", step) < 0) return KILN_ENOMEM;
    /* --exact: only what it asks for, so that the component's other
     * replicas on the node start beside it; --kill-on-bad-exit=0: a
     * replica's exit is the supervisor's to act on; --export=ALL: the
     * replica's environment is exactly the monitor's. No --unbuffered:
     * with it slurmstepd gives the task a pseudo-terminal for stdout, which
     * a node without /dev/pts (a chroot, a container) cannot open ("task 0
     * launch failed: Slurmd could not connect IO") and which makes isatty()
     * true where a pod's and kiln's own replicas see a pipe; slurmstepd
     * sends each whole line on, and replicas get PYTHONUNBUFFERED=1 */
    const char *args[] = {"srun",
                          j,
                          het >= 0 ? h : NULL,
                          "--nodes=1",
                          "--ntasks=1",
                          nl,
                          "--exact",
                          gpus > 0 ? g : NULL,
                          cpus > 0 ? c : NULL,
                          n,
                          "--quiet",
                          "--export=ALL",
                          "--kill-on-bad-exit=0"};
    kiln_err err = KILN_OK;
    for (size_t k = 0; err == KILN_OK && k < sizeof args / sizeof *args; k++)
        if (args[k]) err = kiln_strv_push(av, args[k]);
    if (err == KILN_OK) err = kiln_strv_push(av, "--");
    free(n);
    return err;
}

/* The id ("JOB.STEP") of the running step called `step` of allocation `id`
 * (its srun --job-name); false when squeue lists none. */
static bool step_id(long id, const char *step, char *out, size_t len)
{
    char ids[32], *text = NULL;
    bool found = false;
    snprintf(ids, sizeof ids, "--jobs=%ld", id);
    char *argv[] = {"squeue", "--noheader", "--steps", ids, "--format=%i|%j", NULL};
    if (kiln_slurm_run(argv, &text, CMD_TIMEOUT_S) != 0) {
        free(text);
        return false;
    }
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln && !found; ln = strtok_r(NULL, "\n", &save)) {
        char *bar = strchr(ln, '|');
        if (!bar || strcmp(bar + 1, step) != 0 || (size_t)(bar - ln) >= len) continue;
        *bar = '\0';
        snprintf(out, len, "%s", ln);
        found = true;
    }
    free(text);
    return found;
}

void kiln_slurm_step_signal(long id, const char *step, int sig)
{
    char sid[64], s[48], *out = NULL;
    if (!step_id(id, step, sid, sizeof sid)) return;
    snprintf(s, sizeof s, "--signal=%d", sig);
    char *cv[] = {"scancel", s, sid, NULL};
    kiln_slurm_run(cv, &out, CMD_TIMEOUT_S);
    free(out);
}

/* Slurm's CPU time "[D-]HH:MM:SS", "MM:SS.mmm" or "SS.mmm" in microseconds. */
static bool slurm_time_us(const char *s, unsigned long long *us)
{
    unsigned long long days = 0, secs = 0;
    double frac = 0;
    const char *dash = strchr(s, '-');
    if (dash) {
        char *e;
        days = strtoull(s, &e, 10);
        if (e != dash || e == s || days > 100000) return false;
        s = dash + 1;
    }
    /* up to three numbers joined by ':', the last one seconds, then
     * perhaps a fraction; nothing else */
    for (int n = 0;; n++) {
        char *e;
        if (n == 3 || *s < '0' || *s > '9') return false;
        unsigned long long v = strtoull(s, &e, 10);
        if (v > 1000000) return false;
        secs = secs * 60 + v;
        if (*e == ':') {
            s = e + 1;
            continue;
        }
        if (*e == '.') {
            frac = strtod(e, &e);
            if (frac >= 1) return false;
        }
        if (*e) return false;
        break;
    }
    *us = (days * 86400ULL + secs) * 1000000ULL + (unsigned long long)(frac * 1e6);
    return true;
}

/* A size "4780K", "12M", "1.5G", "123" in bytes; -1 when it is none. */
static long long slurm_bytes(const char *s)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s || v < 0) return -1;
    double m = *e == 'K'   ? 1024.0
               : *e == 'M' ? 1048576.0
               : *e == 'G' ? 1073741824.0
               : *e == 'T' ? 1099511627776.0
                           : 1.0;
    /* no machine has 4 EiB: a figure past that is no figure (and past
     * long long's range, undefined to convert) */
    return v * m < 4611686018427387904.0 ? (long long)(v * m) : -1;
}

bool kiln_slurm_step_usage(long id, const char *step, unsigned long long *cpu_us, long long *mem)
{
    char sid[64], *text = NULL;
    if (!step_id(id, step, sid, sizeof sid)) return false;
    char *argv[] = {"sstat", "--noheader", "--parsable2", "--jobs", sid, "--format=TRESUsageInTot",
                    NULL};
    bool ok = false, got_cpu = false;
    *mem = 0;
    if (kiln_slurm_run(argv, &text, CMD_TIMEOUT_S) == 0 && text) {
        /* "cpu=00:00:03,energy=0,fs/disk=14937,mem=4780K,pages=0,vmem=8112K" */
        char *save = NULL;
        text[strcspn(text, "\n")] = '\0';
        for (char *kv = strtok_r(text, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
            if (strncmp(kv, "cpu=", 4) == 0)
                got_cpu = slurm_time_us(kv + 4, cpu_us);
            else if (strncmp(kv, "mem=", 4) == 0 && slurm_bytes(kv + 4) >= 0)
                *mem = slurm_bytes(kv + 4);
        }
        ok = got_cpu;
    }
    free(text);
    return ok;
}

kiln_err kiln_slurm_cluster(const char *partition, bool hard, kiln_slurm_type_of type_of, void *ctx,
                            kiln_cluster *out, char *note, size_t notelen, char *why, size_t whylen)
{
    size_t nl = 0;
    if (notelen) note[0] = '\0';
    char p[256], *text = NULL;
    snprintf(p, sizeof p, "--partition=%s", partition);
    /* one line per node: name, NodeAddr, CPUs, memory (MB), GRES */
    char *argv[] = {"sinfo", "--noheader", "--Node", p, "--format=%N|%o|%c|%m|%G", NULL};
    kiln_err err = KILN_EIO;
    json_t *nodes = json_array(), *root = NULL;
    memset(out, 0, sizeof *out);
    if (kiln_slurm_run(argv, &text, CMD_TIMEOUT_S) != 0) {
        char b[256];
        kiln_slurm_last_line(text, b, sizeof b);
        snprintf(why, whylen, "sinfo: %s", b);
        goto out;
    }
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); nodes && ln; ln = strtok_r(NULL, "\n", &save)) {
        char *f[5] = {0}, *q = ln;
        for (int k = 0; k < 5 && q; k++) {
            f[k] = q;
            q = k < 4 ? strchr(q, '|') : NULL;
            if (q) *q++ = '\0';
        }
        if (!f[4]) continue;
        bool dup = false;
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n) dup |=
            strcmp(json_string_value(json_object_get(n, "name")), f[0]) == 0;
        if (dup) continue; /* a node in two partitions' lines */
        /* NodeAddr: Slurm's default is NodeHostname, itself NodeName by
         * default, so often a name: resolved here, once; a node whose
         * address does not resolve is reported and left out */
        char ip[64], rwhy[320];
        if (!kiln_node_resolve(*f[1] ? f[1] : f[0], ip, sizeof ip, rwhy, sizeof rwhy)) {
            if (nl < notelen)
                nl += (size_t)snprintf(note + nl, notelen - nl,
                                       "%snode %s is not used: its NodeAddr %s", nl ? "; " : "",
                                       f[0], rwhy);
            continue;
        }
        json_t *accs = json_array();
        /* GRES "gpu:t4:2(S:0)", "gpu:2", "(null)", several comma-separated */
        char *gsave = NULL;
        for (char *g = strtok_r(f[4], ",", &gsave); g; g = strtok_r(NULL, ",", &gsave)) {
            if (strncmp(g, "gpu", 3) != 0) continue;
            char type[64] = "";
            int cnt = 0;
            if (sscanf(g, "gpu:%63[^:]:%d", type, &cnt) != 2) {
                type[0] = '\0';
                if (sscanf(g, "gpu:%d", &cnt) != 1) continue;
            }
            const char *kt = type_of ? type_of(ctx, type) : NULL;
            if (cnt > 0)
                json_array_append_new(
                    accs, json_pack("{s:s,s:i}", "type", kt ? kt : "NVIDIA_GPU", "count", cnt));
        }
        json_array_append_new(nodes,
                              json_pack("{s:s,s:s,s:i,s:f,s:b,s:o}", "name", f[0], "address", ip,
                                        "cpus", atoi(f[2]), "memoryGb", atof(f[3]) / 1024.0,
                                        "hardResources", hard, "accelerators", accs));
    }
    if (json_array_size(nodes) == 0) {
        snprintf(why, whylen, "the Slurm partition %s has no nodes%s%s", partition,
                 nl ? " kilnd can use: " : "", nl ? note : "");
        err = KILN_EINVAL;
        goto out;
    }
    root = json_pack("{s:O}", "nodes", nodes);
    char *doc = root ? json_dumps(root, 0) : NULL;
    kiln_diag dg = {0};
    err = doc ? kiln_cluster_from_json(doc, strlen(doc), out, &dg) : KILN_ENOMEM;
    if (err != KILN_OK)
        snprintf(why, whylen, "Slurm's nodes: %s", dg.n ? dg.v[0].description : "?");
    kiln_diag_free(&dg);
    free(doc);
    /* Slurm's GPUs are real and named by index: what CUDA_VISIBLE_DEVICES
     * holds in a step, and what a CDI spec names them by */
    for (size_t i = 0; err == KILN_OK && i < out->n; i++)
        for (size_t k = 0; k < out->nodes[i].n_devs; k++) {
            kiln_device *dv = &out->nodes[i].devs[k];
            dv->simulated = false;
            free(dv->uuid);
            if (asprintf(&dv->uuid, "%d", dv->index) < 0) dv->uuid = NULL;
            if (!dv->uuid) err = KILN_ENOMEM;
        }
out:
    json_decref(root);
    json_decref(nodes);
    free(text);
    return err;
}

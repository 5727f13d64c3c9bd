/* src/exec/slurm/accounts.c - a Kueue queues file carried out with Slurm's
 * accounting: accounts, QOS and associations made with sacctmgr
 * (accounts.h; docs/slurm.md, "Queues"). The Kueue-to-Slurm arithmetic
 * (GrpTRES, Fairshare) and the refusals are src/queues/qslurm.c's. */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/slurm/accounts.h"
#include "exec/slurm/slurm.h"

#define SACCTMGR_TIMEOUT_S 30

/* Runs sacctmgr with argv (after "sacctmgr"); its exit status, its output's
 * last line (Slurm's words) in `last`, and whether a line of its output is
 * exactly `want` (for the list commands; NULL: not asked). */
static int sacctmgr(char *const *args, const char *want, bool *found, char *last, size_t llen)
{
    char *argv[16] = {"sacctmgr"};
    size_t n = 1;
    for (size_t i = 0; args[i] && n + 1 < sizeof argv / sizeof *argv; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char *out = NULL;
    int rc = kiln_slurm_run(argv, &out, SACCTMGR_TIMEOUT_S);
    if (found) *found = false;
    if (last) last[0] = 0;
    for (char *s = out, *nl; s && *s; s = nl ? nl + 1 : s + strlen(s)) {
        nl = strchr(s, '\n');
        size_t l = nl ? (size_t)(nl - s) : strlen(s);
        while (l && (s[l - 1] == ' ' || s[l - 1] == '\r'))
            l--;
        if (!l) continue;
        if (found && want && strlen(want) == l && strncmp(s, want, l) == 0) *found = true;
        if (last) snprintf(last, llen, "%.*s", (int)(l < 300 ? l : 300), s);
    }
    free(out);
    return rc;
}

static bool fail(char *why, size_t whylen, const char *what, int rc, const char *last)
{
    snprintf(why, whylen, "sacctmgr could not make %s: %s", what,
             last && last[0] ? last
             : rc < 0        ? "it did not run, or ran past 30 s"
                             : "it failed");
    return false;
}

/* Creates or modifies one account (the ClusterQueue's). */
static bool account(const kiln_slurm_cfg *sc, const kiln_queues *q, size_t cq, char *why,
                    size_t whylen)
{
    const char *name = q->cqs[cq].name;
    char tres[200], grp[220], fs[48], parent[300], what[400], last[320];
    /* stopPolicy: Hold -> GrpJobs=0: no job of the account starts, those
     * running run on (Kueue's Hold); -1 lifts it */
    bool hold = q->cqs[cq].stop == KILN_QSTOP_HOLD;
    char *jobs = hold ? "GrpJobs=0" : "GrpJobs=-1";
    kiln_queues_slurm_tres(q, cq, tres, sizeof tres);
    snprintf(fs, sizeof fs, "Fairshare=%ld", kiln_queues_slurm_fairshare(q, cq));
    snprintf(what, sizeof what, "account %s (ClusterQueue %s, GrpTRES=%s)", name, name, tres);
    bool found = false;
    char *list[] = {"-n", "-P", "list", "account", (char *)name, "format=account", NULL};
    int rc = sacctmgr(list, name, &found, last, sizeof last);
    if (rc != 0) return fail(why, whylen, what, rc, last);
    if (found) {
        char wn[300];
        snprintf(wn, sizeof wn, "name=%s", name);
        snprintf(grp, sizeof grp, "GrpTRES=%s", tres);
        char *mod[] = {"-i", "modify", "account", "where", wn, "set", grp, fs, jobs, NULL};
        rc = sacctmgr(mod, NULL, NULL, last, sizeof last);
    } else {
        /* a new account: the limits of covered resources only (-1 clears,
         * which sacctmgr add has no use for) */
        char clean[200] = "";
        char *save = NULL;
        for (char *t = strtok_r(tres, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if (!strstr(t, "=-1"))
                snprintf(clean + strlen(clean), sizeof clean - strlen(clean), "%s%s",
                         clean[0] ? "," : "", t);
        snprintf(grp, sizeof grp, "GrpTRES=%s", clean);
        snprintf(parent, sizeof parent, "parent=%s", sc->account ? sc->account : "root");
        char desc[300];
        snprintf(desc, sizeof desc, "Description=kiln ClusterQueue %s", name);
        char *addv[] = {"-i",
                        "add",
                        "account",
                        (char *)name,
                        parent,
                        desc,
                        fs,
                        hold ? jobs : "GrpJobs=-1",
                        clean[0] ? grp : NULL,
                        NULL};
        rc = sacctmgr(addv, NULL, NULL, last, sizeof last);
    }
    return rc == 0 ? true : fail(why, whylen, what, rc, last);
}

static bool qos(const kiln_qpc *pc, char *why, size_t whylen)
{
    char prio[48], what[300], last[320];
    snprintf(prio, sizeof prio, "Priority=%lld", (long long)pc->value);
    snprintf(what, sizeof what, "QOS %s (WorkloadPriorityClass %s, Priority=%lld)", pc->name,
             pc->name, (long long)pc->value);
    bool found = false;
    char *list[] = {"-n", "-P", "list", "qos", pc->name, "format=name", NULL};
    int rc = sacctmgr(list, pc->name, &found, last, sizeof last);
    if (rc != 0) return fail(why, whylen, what, rc, last);
    char wn[300];
    snprintf(wn, sizeof wn, "name=%s", pc->name);
    char *mod[] = {"-i", "modify", "qos", "where", wn, "set", prio, NULL};
    char *addv[] = {"-i", "add", "qos", pc->name, prio, NULL};
    rc = sacctmgr(found ? mod : addv, NULL, NULL, last, sizeof last);
    return rc == 0 ? true : fail(why, whylen, what, rc, last);
}

/* The association of the LocalQueue's project's user to its ClusterQueue's
 * account, allowed every priority class's QOS. */
static bool assoc(const kiln_slurm_cfg *sc, const kiln_queues *q, const kiln_qlq *lq, char *why,
                  size_t whylen)
{
    const char *acct = q->cqs[lq->cq].name;
    long uid = -1, gid = -1;
    char uwhy[300], user[256], what[700], last[320];
    if (kiln_users_project(sc->users, lq->namespace_, &uid, &gid, uwhy, sizeof uwhy) != KILN_OK) {
        snprintf(why, whylen, "LocalQueue %s/%s: %s", lq->namespace_, lq->name, uwhy);
        return false;
    }
    struct passwd pw, *pp = NULL;
    char pbuf[4096];
    uid_t u = uid >= 0 ? (uid_t)uid : getuid();
    if (getpwuid_r(u, &pw, pbuf, sizeof pbuf, &pp) != 0 || !pp) {
        snprintf(why, whylen,
                 "LocalQueue %s/%s: uid %ld, the user project %s's jobs run as, has no name "
                 "(Slurm's associations are by user name)",
                 lq->namespace_, lq->name, (long)u, lq->namespace_);
        return false;
    }
    snprintf(user, sizeof user, "%s", pp->pw_name);
    snprintf(what, sizeof what,
             "the association of user %s (project %s's jobs) to account %s (LocalQueue %s/%s)",
             user, lq->namespace_, acct, lq->namespace_, lq->name);
    char wa[300], wu[300], fmt[] = "format=user";
    snprintf(wa, sizeof wa, "account=%s", acct);
    snprintf(wu, sizeof wu, "user=%s", user);
    bool found = false;
    char *list[] = {"-n", "-P", "list", "assoc", "where", wa, wu, fmt, NULL};
    int rc = sacctmgr(list, user, &found, last, sizeof last);
    if (rc != 0) return fail(why, whylen, what, rc, last);
    if (!found) {
        char *addv[] = {"-i", "add", "user", user, wa, NULL};
        rc = sacctmgr(addv, NULL, NULL, last, sizeof last);
        if (rc != 0) return fail(why, whylen, what, rc, last);
    }
    if (!q->npcs) return true;
    char qs[1024] = "qos+=";
    for (size_t i = 0; i < q->npcs; i++)
        snprintf(qs + strlen(qs), sizeof qs - strlen(qs), "%s%s", i ? "," : "", q->pcs[i].name);
    char wn[300];
    snprintf(wn, sizeof wn, "name=%s", user);
    char *mod[] = {"-i", "modify", "user", "where", wn, wa, "set", qs, NULL};
    rc = sacctmgr(mod, NULL, NULL, last, sizeof last);
    return rc == 0 ? true : fail(why, whylen, what, rc, last);
}

bool kiln_slurm_accounts_apply(const kiln_slurm_cfg *sc, const kiln_queues *q, char *why,
                               size_t whylen)
{
    for (size_t i = 0; i < q->ncqs; i++)
        if (!account(sc, q, i, why, whylen)) return false;
    for (size_t i = 0; i < q->npcs; i++)
        if (!qos(&q->pcs[i], why, whylen)) return false;
    for (size_t i = 0; i < q->nlqs; i++)
        if (!assoc(sc, q, &q->lqs[i], why, whylen)) return false;
    return true;
}

bool kiln_slurm_job_account(const kiln_queues *q, const char *project, const kiln_map *labels,
                            char *account, size_t alen, char *qosbuf, size_t qlen)
{
    bool ok = false;
    char w[300];
    account[0] = qosbuf[0] = 0;
    long lq = q ? kiln_queues_route(q, project, labels, w, sizeof w) : -1;
    if (lq >= 0) {
        snprintf(account, alen, "%s", q->cqs[q->lqs[lq].cq].name);
        const char *pc = kiln_map_get(labels, KILN_PRIORITY_CLASS_LABEL);
        for (size_t i = 0; pc && i < q->npcs; i++)
            if (strcmp(q->pcs[i].name, pc) == 0) snprintf(qosbuf, qlen, "%s", pc);
        ok = true;
    }
    return ok;
}

void kiln_slurm_wait_reason(const kiln_queues *q, const char *account, const char *qos,
                            const char *reason, char *buf, size_t len)
{
    long cq = -1;
    for (size_t i = 0; q && account && i < q->ncqs; i++)
        if (strcmp(q->cqs[i].name, account) == 0) cq = (long)i;
    const char *r = reason && *reason ? reason : "None";
    char tres[200] = "";
    if (cq >= 0) kiln_queues_slurm_tres(q, (size_t)cq, tres, sizeof tres);
    if (cq >= 0 && strcmp(r, "AssocGrpJobsLimit") == 0 && q->cqs[cq].stop == KILN_QSTOP_HOLD)
        snprintf(buf, len,
                 "Slurm holds it PENDING (%s): ClusterQueue %s is held (stopPolicy: Hold; "
                 "Slurm account %s has GrpJobs=0)",
                 r, q->cqs[cq].name, account);
    else if (cq >= 0 && strncmp(r, "AssocGrp", 8) == 0)
        snprintf(buf, len,
                 "Slurm holds it PENDING (%s): ClusterQueue %s's quota is in use (Slurm account "
                 "%s, GrpTRES=%s)",
                 r, q->cqs[cq].name, account, tres);
    else if (strncmp(r, "QOS", 3) == 0 && qos && *qos)
        snprintf(buf, len, "Slurm holds it PENDING (%s): a limit of QOS %s (priority class %s)", r,
                 qos, qos);
    else if (cq >= 0)
        snprintf(buf, len, "Slurm holds it PENDING (%s) in ClusterQueue %s's account %s", r,
                 q->cqs[cq].name, account);
    else
        snprintf(buf, len, "Slurm holds it PENDING (%s)", r);
}

static void waiting_clear(kiln_slurm_waiting *x)
{
    free(x->project);
    free(x->job_id);
    free(x->cluster_queue);
    free(x->local_queue);
    free(x->why);
    *x = (kiln_slurm_waiting){0};
}

void kiln_slurm_waiting_free(kiln_slurm_waiting *v, size_t k)
{
    for (size_t i = 0; v && i < k; i++)
        waiting_clear(&v[i]);
    free(v);
}

kiln_slurm_waiting *kiln_slurm_waits(const kiln_queues *q, const kiln_slurm_wait *w, size_t n,
                                     size_t *k)
{
    kiln_slurm_waiting *v = calloc(n ? n : 1, sizeof *v);
    *k = 0;
    for (size_t i = 0; v && i < n; i++) {
        char why[600];
        kiln_slurm_wait_reason(q, w[i].account, w[i].qos, w[i].reason, why, sizeof why);
        kiln_slurm_waiting *x = &v[*k];
        x->project = strdup(w[i].project);
        x->job_id = strdup(w[i].job_id);
        x->why = strdup(why);
        for (size_t c = 0; q && w[i].account && c < q->ncqs; c++)
            if (strcmp(q->cqs[c].name, w[i].account) == 0) {
                x->cluster_queue = strdup(q->cqs[c].name);
                for (size_t l = 0; l < q->nlqs; l++)
                    if (q->lqs[l].cq == c && strcmp(q->lqs[l].namespace_, w[i].project) == 0) {
                        x->local_queue = strdup(q->lqs[l].name);
                        break;
                    }
            }
        if (!x->project || !x->job_id || !x->why) { /* out of memory: left out */
            waiting_clear(x);
            continue;
        }
        (*k)++;
    }
    return v;
}

/* "N(3)" or "2(3)" -> 3 (the part in use); -1 when there is none */
static long long used_of(const char *v)
{
    const char *p = strchr(v, '(');
    return p ? strtoll(p + 1, NULL, 10) : -1;
}

/* One line of scontrol -o show assoc_mgr: an account's own association
 * (UserName empty) into *u; false for any other line. */
static bool usage_line(char *line, kiln_slurm_acct_usage *u)
{
    char *acct = NULL, *tres = NULL, *save = NULL;
    bool account_level = false;
    long long jobs = -1, submitted = -1;
    for (char *t = strtok_r(line, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (strncmp(t, "Account=", 8) == 0)
            acct = t + 8;
        else if (strcmp(t, "UserName=") == 0)
            account_level = true;
        else if (strncmp(t, "GrpJobs=", 8) == 0)
            jobs = used_of(t + 8);
        else if (strncmp(t, "GrpSubmitJobs=", 14) == 0)
            submitted = used_of(t + 14);
        else if (strncmp(t, "GrpTRES=", 8) == 0)
            tres = t + 8;
    }
    if (!acct || !account_level) return false;
    *u = (kiln_slurm_acct_usage){.jobs = jobs, .submitted = submitted};
    for (size_t r = 0; r < KILN_QRES_COUNT; r++)
        u->used[r] = -1;
    char *s2 = NULL;
    for (char *e = tres ? strtok_r(tres, ",", &s2) : NULL; e; e = strtok_r(NULL, ",", &s2)) {
        int r = strncmp(e, "gres/gpu=", 9) == 0 ? KILN_QRES_GPU
                : strncmp(e, "cpu=", 4) == 0    ? KILN_QRES_CPU
                : strncmp(e, "mem=", 4) == 0    ? KILN_QRES_MEMORY
                                                : -1;
        long long n = r >= 0 ? used_of(e) : -1;
        if (n < 0) continue;
        /* Slurm's units -> kiln_queues': CPUs -> millicores, MB -> bytes */
        u->used[r] = r == KILN_QRES_CPU ? n * 1000 : r == KILN_QRES_MEMORY ? n * 1024 * 1024 : n;
    }
    u->account = strdup(acct);
    return u->account != NULL;
}

bool kiln_slurm_usage_accounts(const kiln_queues *q, char *buf, size_t len)
{
    snprintf(buf, len, "accounts=");
    for (size_t i = 0; q && i < q->ncqs; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? "," : "", q->cqs[i].name);
    return strcmp(buf, "accounts=") != 0;
}

void kiln_slurm_usage_free(kiln_slurm_usage *u)
{
    for (size_t i = 0; u->v && i < u->n; i++)
        free(u->v[i].account);
    free(u->v);
    *u = (kiln_slurm_usage){0};
}

bool kiln_slurm_usage_read(const char *accounts, kiln_slurm_usage *u)
{
    *u = (kiln_slurm_usage){0};
    char *out = NULL;
    char *argv[] = {"scontrol", "-o", "show", "assoc_mgr", "flags=assoc", (char *)accounts, NULL};
    if (kiln_slurm_run(argv, &out, 10) != 0 || !out) {
        free(out);
        return false;
    }
    size_t cap = 0;
    bool ok = true;
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); ok && l; l = strtok_r(NULL, "\n", &save)) {
        kiln_slurm_acct_usage a;
        if (!usage_line(l, &a)) continue; /* another line (or out of memory: left out) */
        if (u->n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            kiln_slurm_acct_usage *nv = realloc(u->v, nc * sizeof *nv);
            if (!nv) {
                free(a.account);
                ok = false; /* out of memory: nothing is to change */
                break;
            }
            u->v = nv;
            cap = nc;
        }
        u->v[u->n++] = a;
    }
    free(out);
    if (!ok) kiln_slurm_usage_free(u);
    return ok;
}

void kiln_slurm_usage_store(kiln_queues *q, const kiln_slurm_usage *u)
{
    kiln_queues_reset_usage(q);
    for (size_t i = 0; i < q->ncqs; i++)
        q->cqs[i].admitted = q->cqs[i].pending = 0;
    for (size_t i = 0; i < u->n; i++) {
        const kiln_slurm_acct_usage *a = &u->v[i];
        for (size_t c = 0; c < q->ncqs; c++) {
            kiln_qcq *cq = &q->cqs[c];
            if (strcmp(cq->name, a->account) != 0) continue;
            if (a->jobs >= 0) cq->admitted = (long)a->jobs;
            if (a->submitted >= 0 && a->jobs >= 0) cq->pending = (long)(a->submitted - a->jobs);
            for (size_t r = 0; r < KILN_QRES_COUNT; r++) {
                if (a->used[r] < 0) continue;
                for (size_t g = 0; g < cq->ngroups; g++)
                    if (cq->groups[g].covers[r] && cq->groups[g].n) {
                        cq->groups[g].flavors[0].usage[r] = (int64_t)a->used[r]; /* one flavor */
                        break;
                    }
            }
            break;
        }
    }
}

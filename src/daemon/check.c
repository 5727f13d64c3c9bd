/* src/daemon/check.c - kilnd --check-config (check.h).
 *
 * Each check prints "ok      WHAT: what it found" or "PROBLEM WHAT: why",
 * and a problem never stops the checks after it. The loading is the same
 * code a start runs (kiln_tokens_load, kiln_users_parse_line,
 * kiln_catalog_*, kiln_queues_load_file, kiln_cluster_load,
 * kiln_slurm_cluster), so a configuration that passes here loads there. */
#include "daemon/check.h"

#include <errno.h>
#include <grp.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exec/slurm/alloc.h"
#include "exec/slurm/slurm.h"
#include "kiln/auth.h"
#include "kiln/catalog.h"
#include "kiln/devices.h"
#include "kiln/queues.h"

typedef struct chk {
    FILE *out;
    int problems;
} chk;

static void say(chk *c, bool ok, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(chk *c, bool ok, const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(c->out, "%-7s %s: ", ok ? "ok" : "PROBLEM", what);
    vfprintf(c->out, fmt, ap);
    fputc('\n', c->out);
    va_end(ap);
    if (!ok) c->problems++;
    fflush(c->out); /* the loaders below write their own words to stderr */
}

/* A diag's violations, each as a problem of WHAT. */
static void say_diag(chk *c, const char *what, const kiln_diag *dg)
{
    for (size_t i = 0; i < dg->n; i++)
        say(c, false, what, "%s%s%s", dg->v[i].field, *dg->v[i].field ? ": " : "",
            dg->v[i].description);
    if (!dg->n) say(c, false, what, "refused (no reason given)");
}

static bool is_loopback(const char *host)
{
    return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0 || strncmp(host, "127.", 4) == 0;
}

static void check_listen(chk *c, const kilnd *d, const kilnd_check_opts *o)
{
    char host[256];
    const char *colon = strrchr(d->listen, ':');
    size_t hl = colon ? (size_t)(colon - d->listen) : 0;
    if (!colon || hl >= sizeof host) {
        say(c, false, "--listen", "'%s' is not HOST:PORT", d->listen);
        return;
    }
    memcpy(host, d->listen, hl);
    host[hl] = '\0';
    bool loop = is_loopback(host);
    if (!loop && !d->tokens_path)
        say(c, false, "--listen", "%s is beyond loopback and there is no --tokens file", d->listen);
    else if (!loop && !d->tls_cert && !o->insecure_plain)
        say(c, false, "--listen",
            "%s is beyond loopback over plain HTTP: give --tls-cert and --tls-key "
            "(or --insecure-plain-http on a network you trust)",
            d->listen);
    else
        say(c, true, "--listen", "%s%s", d->listen,
            d->tls_cert ? " (HTTPS)"
            : loop      ? " (loopback, HTTP)"
                        : " (plain HTTP, allowed)");
}

static void check_tokens(chk *c, kilnd *d)
{
    char err[PATH_MAX + 256], line[1024];
    size_t n_plain = 0;
    if (!d->tokens_path) {
        say(c, true, "tokens", "none (no --tokens): every caller may do anything, loopback only");
        return;
    }
    kiln_tokens *t = kiln_tokens_load(d->tokens_path, &n_plain, err, sizeof err);
    if (!t) {
        say(c, false, "tokens", "%s", err);
        return;
    }
    size_t n = kiln_tokens_count(t);
    kiln_auth_swap(d->auth, t); /* into d, as a start would; main's cleanup frees it */
    say(c, true, "tokens", "%s: %zu token%s%s", d->tokens_path, n, n == 1 ? "" : "s",
        n_plain ? " (warning: some in clear, not 'sha256:HEX')" : "");
    FILE *f = fopen(d->tokens_path, "r");
    int lineno = 0;
    if (!f) return; /* just read by kiln_tokens_load: gone since */
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (strncmp(line, "project ", 8) != 0 && strncmp(line, "serviceaccount ", 15) != 0)
            continue;
        size_t before = kiln_users_count(d->users);
        fflush(c->out);
        const kiln_user *u = NULL;
        if (kiln_users_parse_line(d->users, d->tokens_path, lineno, line) < 0 ||
            !(u = kiln_users_at(d->users, before)))
            say(c, false, "project user", "%s:%d: refused (the line above says why)",
                d->tokens_path, lineno);
        else if (u->account)
            say(c, true, "project user",
                "project %s's jobs with serviceAccount %s run as %s (uid %ld, gid %ld)", u->project,
                u->account, u->user, u->uid, u->gid);
        else
            say(c, true, "project user", "project %s runs as %s (uid %ld, gid %ld)", u->project,
                u->user, u->uid, u->gid);
    }
    fclose(f);
}

/* The rules kiln_users_report states at start, as problems: a
 * configuration under which kilnd refuses every job of a project. */
static void check_run_as(chk *c, const kilnd *d)
{
    bool root = geteuid() == 0, every = false;
    for (size_t i = 0; i < kiln_users_count(d->users); i++) {
        const kiln_user *u = kiln_users_at(d->users, i);
        every |= strcmp(u->project, "*") == 0;
        if (root && u->uid == 0 && !d->allow_root_replicas)
            say(c, false, "run-as",
                "project %s runs as root and --allow-root-replicas is not yes: its jobs "
                "would be refused",
                u->project);
        else if (!root && (uid_t)u->uid != geteuid())
            say(c, false, "run-as",
                "project %s runs as %s, and kilnd (uid %ld, not root) cannot switch to it",
                u->project, u->user, (long)geteuid());
    }
    if (root && !every && !d->allow_root_replicas)
        say(c, false, "run-as",
            "kilnd runs as root: the jobs of %s would be refused (name each project's user "
            "in the tokens file, or --allow-root-replicas yes on a single-user machine)",
            kiln_users_count(d->users) ? "a project with no user" : "every project");
    else
        say(c, true, "run-as", "%s",
            !root                    ? "kilnd is not root; replicas run as kilnd's own user"
            : d->allow_root_replicas ? "kilnd is root; replicas run as their project's user, "
                                       "root for a project with none (--allow-root-replicas)"
                                     : "kilnd is root; replicas run as their project's user");
}

/* Can uid (in gid and its supplementary groups) do `bit` (S_IXUSR-style:
 * 1 search/execute, 4 read, 2 write, as the owner's bits shifted) to st? */
static bool may(const struct stat *st, uid_t uid, const gid_t *groups, int ngroups, int bit)
{
    if (uid == 0) return bit != 1 || (st->st_mode & 0111) || S_ISDIR(st->st_mode);
    if (st->st_uid == uid) return st->st_mode & (bit << 6);
    for (int i = 0; i < ngroups; i++)
        if (st->st_gid == groups[i]) return st->st_mode & (bit << 3);
    return st->st_mode & bit;
}

/* The first directory on the way to `path` (or path itself, needing
 * `last_bit`) that the user cannot pass; NULL when it can get there. */
static const char *blocked(const char *path, uid_t uid, gid_t gid, const char *name, int last_bit,
                           char *buf, size_t len)
{
    gid_t groups[64];
    int ng = 64;
    if (getgrouplist(name, gid, groups, &ng) < 0) {
        groups[0] = gid;
        ng = 1;
    }
    snprintf(buf, len, "%s", path);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end) continue;
        char save = *p;
        *p = '\0';
        struct stat st;
        int bit = end ? last_bit : 1;
        if (stat(buf, &st) < 0 || !may(&st, uid, groups, ng, bit)) return buf;
        *p = save;
        if (end) return NULL;
    }
}

static void check_data_dir(chk *c, const kilnd *d, const char *kiln_train)
{
    char abs[PATH_MAX], buf[PATH_MAX + 16];
    struct stat st;
    if (stat(d->data_dir, &st) < 0) {
        int e = errno;
        say(c, e == ENOENT, "--data-dir", "%s: %s%s", d->data_dir, strerror(e),
            e == ENOENT ? " (created at start)" : "");
        return;
    }
    if (!S_ISDIR(st.st_mode) || access(d->data_dir, W_OK | X_OK) != 0) {
        say(c, false, "--data-dir", "%s is not a directory kilnd (uid %ld) may write", d->data_dir,
            (long)geteuid());
        return;
    }
    if (!realpath(d->data_dir, abs)) snprintf(abs, sizeof abs, "%s", d->data_dir);
    snprintf(buf, sizeof buf, "%s/kilnd.db", abs);
    say(c, true, "--data-dir", "%s (%s)", abs,
        access(buf, F_OK) == 0 ? "holds a store, kilnd.db" : "no store yet: made at start");
    /* A replica runs as its project's user in DATA/jobs/P/J (chowned to
     * it): every directory on the way must let that user through, and
     * kiln-train must be executable by it. */
    for (size_t i = 0; i < kiln_users_count(d->users); i++) {
        const kiln_user *u = kiln_users_at(d->users, i);
        if ((uid_t)u->uid == geteuid()) continue;
        const char *b = blocked(abs, (uid_t)u->uid, (gid_t)u->gid, u->user, 1, buf, sizeof buf);
        if (b)
            say(c, false, "permissions",
                "project %s's user %s cannot search %s, on the way to its jobs' directories "
                "under %s/jobs",
                u->project, u->user, b, abs);
        else
            say(c, true, "permissions", "project %s's user %s reaches %s/jobs", u->project, u->user,
                abs);
        if (kiln_train &&
            (b = blocked(kiln_train, (uid_t)u->uid, (gid_t)u->gid, u->user, 1, buf, sizeof buf)))
            say(c, false, "permissions", "project %s's user %s cannot run %s (blocked at %s)",
                u->project, u->user, kiln_train, b);
    }
}

static void check_catalog(chk *c, kilnd *d)
{
    kiln_diag dg = KILN_DIAG_INIT;
    if (kiln_catalog_default(&d->catalog, &dg) != KILN_OK) {
        say_diag(c, "catalog", &dg);
        goto out;
    }
    if (!d->catalog_path) {
        say(c, true, "catalog", "the built-in one (no --catalog)");
        goto out;
    }
    if (kiln_catalog_merge_file(d->catalog, d->catalog_path, &dg) != KILN_OK)
        say_diag(c, "--catalog", &dg);
    else
        say(c, true, "--catalog", "%s merged into the built-in catalog", d->catalog_path);
out:
    kiln_diag_free(&dg);
}

static void check_queues(chk *c, kilnd *d)
{
    kiln_diag dg = KILN_DIAG_INIT;
    if (!d->queues_path) {
        say(c, true, "queues", "none (no --queues): jobs are admitted in priority order");
        goto out;
    }
    if (kiln_queues_load_file(d->queues_path, &d->queues, &dg) != KILN_OK)
        say_diag(c, "--queues", &dg);
    else
        say(c, true, "--queues", "%s: %zu ClusterQueue%s, %zu LocalQueue%s", d->queues_path,
            d->queues->ncqs, d->queues->ncqs == 1 ? "" : "s", d->queues->nlqs,
            d->queues->nlqs == 1 ? "" : "s");
out:
    kiln_diag_free(&dg);
}

static const char *slurm_type_of(void *ctx, const char *gres)
{
    return kiln_slurm_kiln_type(ctx, gres);
}

static void check_nodes(chk *c, kilnd *d)
{
    kiln_diag dg = KILN_DIAG_INIT;
    char note[1024], left[1024];
    if (d->slurm.on) {
        /* the GPU type map is all that slurm_type_of reads */
        kiln_slurm_cfg sc = {.gpu_types = d->slurm.gpu_types, .gpu_type_n = d->slurm.gpu_type_n};
        if (kiln_slurm_cluster(d->slurm.partition, d->slurm.machine_resources, slurm_type_of, &sc,
                               &d->cluster, left, sizeof left, note, sizeof note) != KILN_OK) {
            say(c, false, "slurm", "partition %s: %s", d->slurm.partition, note);
            goto out;
        }
        say(c, true, "slurm", "partition %s reachable: %zu node%s", d->slurm.partition,
            d->cluster.n, d->cluster.n == 1 ? "" : "s");
        /* a node whose address does not resolve is left out of placement */
        if (left[0]) say(c, false, "slurm", "%s", left);
        goto out;
    }
    if (kiln_cluster_load(d->node_config, d->nvml_library, &d->cluster, &dg, note, sizeof note) !=
        KILN_OK) {
        say_diag(c, "--node-config", &dg);
        goto out;
    }
    size_t gpus = 0;
    for (size_t i = 0; i < d->cluster.n; i++)
        gpus += d->cluster.nodes[i].n_devs;
    if (d->node_config) {
        say(c, true, "--node-config", "%s: %zu node%s, %zu GPU%s (declared)", d->node_config,
            d->cluster.n, d->cluster.n == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s");
        goto out;
    }
    /* a library named (flag or environment) that finds nothing is a
     * mistake; no library on a machine without GPUs is not */
    const char *named = d->nvml_library ? d->nvml_library : getenv("KILN_NVML_LIBRARY");
    bool named_set = named && *named;
    say(c, gpus || !named_set, "GPUs", "%s", note);
    for (size_t i = 0; i < d->cluster.n; i++)
        for (size_t j = 0; j < d->cluster.nodes[i].n_devs; j++)
            if (d->cluster.nodes[i].devs[j].refused)
                say(c, true, "GPUs", "GPU %d is not handed out: %s",
                    d->cluster.nodes[i].devs[j].index, d->cluster.nodes[i].devs[j].refused);
out:
    kiln_diag_free(&dg);
}

/* NAME beside the running kilnd, into buf; false when it is not there. */
static bool beside_self(const char *name, char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return false;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return false;
    *slash = '\0';
    snprintf(buf, len, "%s/%s", self, name);
    return access(buf, X_OK) == 0;
}

/* An executable by name on PATH (a name with a slash as it is). */
static bool on_path(const char *name, char *buf, size_t len)
{
    if (strchr(name, '/')) {
        snprintf(buf, len, "%s", name);
        return access(name, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    char *dirs = strdup(path ? path : "/usr/local/bin:/usr/bin:/bin"), *save = NULL;
    bool found = false;
    for (char *dir = dirs ? strtok_r(dirs, ":", &save) : NULL; dir && !found;
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(buf, len, "%s/%s", dir, name);
        found = access(buf, X_OK) == 0;
    }
    free(dirs);
    return found;
}

/* The executor's programs; *kiln_train gets kiln-train's path (buf) or NULL. */
static void check_programs(chk *c, const kilnd *d, const kilnd_check_opts *o, char *train,
                           size_t len, const char **kiln_train)
{
    char buf[PATH_MAX + 64];
    *kiln_train = NULL;
    if (o->monitor)
        say(c, access(o->monitor, X_OK) == 0, "--monitor", "%s%s", o->monitor,
            access(o->monitor, X_OK) == 0 ? "" : ": not an executable");
    else if (beside_self("kiln-monitor", buf, sizeof buf))
        say(c, true, "kiln-monitor", "%s", buf);
    else
        say(c, false, "kiln-monitor", "not beside kilnd (give --monitor PATH)");
    if (o->kiln_train) {
        bool ok = access(o->kiln_train, X_OK) == 0;
        say(c, ok, "--kiln-train", "%s%s", o->kiln_train, ok ? "" : ": not an executable");
        if (ok) *kiln_train = o->kiln_train;
    } else if (beside_self("kiln-train", train, len)) {
        say(c, true, "kiln-train", "%s", train);
        *kiln_train = train;
    } else
        say(c, true, "kiln-train", "none beside kilnd: jobs naming kiln-train are refused");
    const char *rt = o->runtime ? o->runtime : "podman";
    bool have = on_path(rt, buf, sizeof buf);
    if (o->runtime && !have)
        say(c, false, "--container-runtime", "%s is not an executable", o->runtime);
    else
        say(c, true, "containers", "%s",
            have ? buf : "none (no podman on PATH): process jobs only");
    if (d->slurm.on)
        say(c, beside_self("kiln-slurm-task", buf, sizeof buf), "kiln-slurm-task", "%s",
            beside_self("kiln-slurm-task", buf, sizeof buf) ? buf : "not beside kilnd");
}

/* The certificate and key as GnuTLS will take them at start: both parse,
 * they are a pair, and the certificate is valid now. */
static void check_tls(chk *c, const kilnd *d)
{
    gnutls_certificate_credentials_t cred = NULL;
    gnutls_x509_crt_t crt = NULL;
    gnutls_datum_t pem = {0};
    struct stat st;
    int e;
    if (!d->tls_cert) {
        say(c, true, "TLS", "none (plain HTTP)");
        return;
    }
    if (gnutls_certificate_allocate_credentials(&cred) < 0) goto out;
    e = gnutls_certificate_set_x509_key_file(cred, d->tls_cert, d->tls_key, GNUTLS_X509_FMT_PEM);
    if (e < 0) {
        say(c, false, "TLS", "--tls-cert %s / --tls-key %s: %s", d->tls_cert, d->tls_key,
            gnutls_strerror(e));
        goto out;
    }
    if (stat(d->tls_key, &st) == 0 && (st.st_mode & 0077))
        say(c, false, "--tls-key", "%s is readable by group or others (mode %03o): chmod 0600",
            d->tls_key, (unsigned)(st.st_mode & 0777));
    if (gnutls_load_file(d->tls_cert, &pem) < 0 || gnutls_x509_crt_init(&crt) < 0 ||
        gnutls_x509_crt_import(crt, &pem, GNUTLS_X509_FMT_PEM) < 0) {
        say(c, false, "--tls-cert", "%s: cannot read its first certificate", d->tls_cert);
        goto out;
    }
    time_t now = time(NULL), from = gnutls_x509_crt_get_activation_time(crt),
           until = gnutls_x509_crt_get_expiration_time(crt);
    char when[64];
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime_r(&until, &tm));
    if (until != (time_t)-1 && until < now)
        say(c, false, "--tls-cert", "%s expired on %s", d->tls_cert, when);
    else if (from != (time_t)-1 && from > now)
        say(c, false, "--tls-cert", "%s is not valid yet", d->tls_cert);
    else
        say(c, true, "TLS", "%s and its key are a pair, valid until %s", d->tls_cert, when);
out:
    if (crt) gnutls_x509_crt_deinit(crt);
    gnutls_free(pem.data);
    if (cred) gnutls_certificate_free_credentials(cred);
}

int kilnd_check_config(kilnd *d, const kilnd_check_opts *o, FILE *out)
{
    chk c = {.out = out};
    char train[PATH_MAX + 64];
    const char *kiln_train = NULL;
    fprintf(out, "kilnd --check-config: executor %s, data dir %s\n",
            d->slurm.on ? "slurm" : "local", d->data_dir);
    check_listen(&c, d, o);
    check_tls(&c, d);
    check_tokens(&c, d);
    check_run_as(&c, d);
    check_catalog(&c, d);
    check_queues(&c, d);
    check_nodes(&c, d);
    check_programs(&c, d, o, train, sizeof train, &kiln_train);
    check_data_dir(&c, d, kiln_train);
    if (c.problems)
        fprintf(out, "kilnd --check-config: %d problem%s\n", c.problems,
                c.problems == 1 ? "" : "s");
    else
        fprintf(out, "kilnd --check-config: no problems\n");
    return c.problems ? 1 : 0;
}

/* src/auth/users.c - the Unix users that projects' replicas run as.
 *
 * A project names its user next to its tokens ("project P user U [group
 * G]" in the tokens file). kilnd started as root runs a replica as that
 * user; with no user named it would run as root, which it refuses unless
 * the site says so (--allow-root-replicas). kilnd not started as root runs
 * replicas as itself and cannot switch: a project user is then an error, not
 * a silent downgrade. Both are refused when a job is created (src/api), said
 * at start (kiln_users_report), and checked again at placement for jobs a
 * kilnd with another configuration accepted. */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/auth.h"

struct kiln_users {
    kiln_user *v;
    size_t n;
    bool allow_root; /* kilnd as root may run replicas as root */
};

kiln_users *kiln_users_new(bool allow_root)
{
    kiln_users *u = calloc(1, sizeof *u);
    if (u) u->allow_root = allow_root;
    return u;
}

void kiln_users_free(kiln_users *u)
{
    if (!u) return;
    for (size_t i = 0; i < u->n; i++) {
        free(u->v[i].project);
        free(u->v[i].user);
        free(u->v[i].account);
    }
    free(u->v);
    free(u);
}

size_t kiln_users_count(const kiln_users *u)
{
    return u->n;
}

const kiln_user *kiln_users_at(const kiln_users *u, size_t i)
{
    return i < u->n ? &u->v[i] : NULL;
}

int kiln_users_parse_line(kiln_users *us, const char *path, int lineno, const char *line)
{
    char proj[128], kw[16], user[64], kw2[16] = "", group[64] = "", account[320] = "";
    int skip = 0;
    /* "serviceaccount SA " before the project's words */
    if (strncmp(line, "serviceaccount ", 15) == 0 &&
        (sscanf(line, "serviceaccount %319s %n", account, &skip) != 1 || skip == 0 ||
         strncmp(line + skip, "project ", 8) != 0)) {
        fprintf(stderr,
                "kilnd: %s:%d: expected 'serviceaccount ACCOUNT project PROJECT user USER "
                "[group GROUP]'\n",
                path, lineno);
        return -1;
    }
    int n = sscanf(line + skip, "project %127s %15s %63s %15s %63s", proj, kw, user, kw2, group);
    if ((n != 3 && n != 5) || strcmp(kw, "user") != 0 || (n == 5 && strcmp(kw2, "group") != 0)) {
        fprintf(stderr, "kilnd: %s:%d: expected '%sproject PROJECT user USER [group GROUP]'\n",
                path, lineno, account[0] ? "serviceaccount ACCOUNT " : "");
        return -1;
    }
    struct passwd *pw = getpwnam(user);
    if (!pw) {
        fprintf(stderr, "kilnd: %s:%d: no such user '%s'\n", path, lineno, user);
        return -1;
    }
    long gid = (long)pw->pw_gid;
    if (n == 5) {
        struct group *gr = getgrnam(group);
        if (!gr) {
            fprintf(stderr, "kilnd: %s:%d: no such group '%s'\n", path, lineno, group);
            return -1;
        }
        gid = (long)gr->gr_gid;
    }
    kiln_user *nu = realloc(us->v, (us->n + 1) * sizeof *nu);
    if (!nu) return -1;
    us->v = nu;
    kiln_user *u = &us->v[us->n++];
    u->project = strdup(proj);
    u->user = strdup(user);
    u->uid = (long)pw->pw_uid;
    u->gid = gid;
    u->account = account[0] ? strdup(account) : NULL;
    return u->project && u->user && (!account[0] || u->account) ? 0 : -1;
}

int kiln_users_load(kiln_users *u, const char *path)
{
    char line[1024];
    int lineno = 0, rc = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kilnd: cannot read the tokens file '%s': %s\n", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        if (strncmp(line, "project ", 8) == 0 || strncmp(line, "serviceaccount ", 15) == 0)
            rc = kiln_users_parse_line(u, path, lineno, line);
    }
    fclose(f);
    return rc;
}

/* The line of the tokens file that names `project`'s user (its own, else
 * the first "project * user U"), or NULL. */
static const kiln_user *user_of(const kiln_users *us, const char *project)
{
    for (size_t i = 0; i < us->n; i++)
        if (!us->v[i].account &&
            (strcmp(us->v[i].project, project) == 0 || strcmp(us->v[i].project, "*") == 0))
            return &us->v[i];
    return NULL;
}

/* The "serviceaccount" line mapping `account` for `project` (its own
 * project's first, else "*"), or NULL. */
static const kiln_user *account_of(const kiln_users *us, const char *project, const char *account)
{
    const kiln_user *any = NULL;
    for (size_t i = 0; i < us->n; i++) {
        const kiln_user *u = &us->v[i];
        if (!u->account || strcmp(u->account, account) != 0) continue;
        if (strcmp(u->project, project) == 0) return u;
        if (!any && strcmp(u->project, "*") == 0) any = u;
    }
    return any;
}

/* The rules for the user `u` (NULL: none named) of a job of `project`. */
static kiln_err user_rules(const kiln_users *us, const kiln_user *u, const char *project, long *uid,
                           long *gid, char *why, size_t whylen)
{
    bool root = geteuid() == 0;
    char ln[640] = ""; /* the tokens file's line, as the messages quote it */
    if (u)
        snprintf(ln, sizeof ln, "%s%.320s%sproject %s user %s", u->account ? "serviceaccount " : "",
                 u->account ? u->account : "", u->account ? " " : "", u->project, u->user);
    *uid = *gid = -1;
    if (u && !root && (uid_t)u->uid != geteuid()) {
        snprintf(why, whylen,
                 "project %s runs as user %s ('%s' in the tokens file), and kilnd (uid %ld, not "
                 "root) cannot switch to it: start kilnd as root, or as that user",
                 project, u->user, ln, (long)geteuid());
        return KILN_EINVAL;
    }
    if (root && (!u || u->uid == 0) && !us->allow_root) {
        if (u)
            snprintf(why, whylen,
                     "kilnd runs as root and the tokens file runs project %s as root ('%s'): "
                     "name another user there, or, on a single-user machine, start kilnd with "
                     "--allow-root-replicas yes",
                     project, ln);
        else
            snprintf(why, whylen,
                     "kilnd runs as root and would run project %s's replicas as root: name the "
                     "project's user in kilnd's tokens file ('project %s user U'), or, on a "
                     "single-user machine, start kilnd with --allow-root-replicas yes",
                     project, project);
        return KILN_EINVAL;
    }
    if (u && root) {
        *uid = u->uid;
        *gid = u->gid;
    }
    return KILN_OK;
}

kiln_err kiln_users_project(const kiln_users *us, const char *project, long *uid, long *gid,
                            char *why, size_t whylen)
{
    return user_rules(us, user_of(us, project), project, uid, gid, why, whylen);
}

kiln_err kiln_users_job(const kiln_users *us, const char *project, const char *account, long *uid,
                        long *gid, char *why, size_t whylen)
{
    if (!account || !*account) return kiln_users_project(us, project, uid, gid, why, whylen);
    const kiln_user *u = account_of(us, project, account);
    *uid = *gid = -1;
    if (!u) {
        snprintf(why, whylen,
                 "serviceAccount %s: kilnd maps no service account to a Unix user for project "
                 "%s; its replicas would run as that account's user: add 'serviceaccount %s "
                 "project %s user U' to kilnd's tokens file, or leave serviceAccount out (the "
                 "project's user)",
                 account, project, account, project);
        return KILN_EINVAL;
    }
    return user_rules(us, u, project, uid, gid, why, whylen);
}

void kiln_users_who(long uid, long gid, char *out, size_t len)
{
    long u = uid >= 0 ? uid : (long)geteuid(), g = gid >= 0 ? gid : (long)getegid();
    char name[64];
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r((uid_t)u, &pw, buf, sizeof buf, &res) == 0 && res)
        snprintf(name, sizeof name, "%.60s", res->pw_name);
    else
        snprintf(name, sizeof name, "%ld", u);
    snprintf(out, len, "user %s (uid %ld, gid %ld), %s", name, u, g,
             uid >= 0 ? "the project's user in kilnd's tokens file"
                      : "the user kilnd itself runs as");
}

void kiln_users_report(const kiln_users *us)
{
    bool root = geteuid() == 0, any = false;
    char others[512] = "";
    size_t n = 0;

    for (size_t i = 0; i < us->n; i++) {
        const kiln_user *u = &us->v[i];
        if (user_of(us, u->project) != u) continue; /* shadowed: never used */
        any |= strcmp(u->project, "*") == 0;
        if (strcmp(u->project, "*") != 0 && n < sizeof others)
            n += (size_t)snprintf(others + n, sizeof others - n, "%s%s", n ? ", " : "", u->project);
        if (root && u->uid == 0 && !us->allow_root)
            fprintf(stderr,
                    "kilnd: as configured, kilnd will refuse every job of project %s: it runs as "
                    "root ('project %s user %s') and --allow-root-replicas is not yes\n",
                    u->project, u->project, u->user);
        else if (!root && (uid_t)u->uid != geteuid())
            fprintf(stderr,
                    "kilnd: as configured, kilnd will refuse every job of project %s: it runs as "
                    "user %s, and kilnd (uid %ld, not root) cannot switch to it\n",
                    u->project, u->user, (long)geteuid());
    }
    if (root && !any && !us->allow_root)
        fprintf(stderr,
                "kilnd: as configured, kilnd will refuse every job of %s%s: it runs as root and "
                "would run their replicas as root. Name each project's user in the tokens file "
                "('project P user U', kilnd --tokens FILE), or, on a single-user machine, start "
                "kilnd with --allow-root-replicas yes (docs/service.md)\n",
                n ? "a project other than " : "every project", others);
}

/* As user `u` (a child process that switches to it), the first of `dir`'s
 * ancestors and `dir` itself that it cannot enter, into `bad`; false when
 * it can enter them all (or the check itself could not run: then the
 * replica's start says why, as before). */
static bool cannot_enter(const kiln_user *u, const char *dir, char *bad, size_t blen)
{
    int fds[2];
    bool found = false;
    if (pipe(fds) < 0) return false;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        char p[PATH_MAX];
        close(fds[0]);
        if (initgroups(u->user, (gid_t)u->gid) < 0 || setgid((gid_t)u->gid) < 0 ||
            setuid((uid_t)u->uid) < 0)
            _exit(2);
        snprintf(p, sizeof p, "%s", dir);
        /* each prefix ending at a '/', then the whole path */
        for (char *c = p + 1;; c++) {
            if (*c == '/' || !*c) {
                char keep = *c;
                *c = '\0';
                if (access(p, X_OK) != 0) {
                    ssize_t w = write(fds[1], p, strlen(p));
                    _exit(w > 0 ? 1 : 2);
                }
                *c = keep;
            }
            if (!*c) break;
        }
        _exit(0);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], bad, blen - 1);
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 1 && n > 0) {
        bad[n] = '\0';
        found = true;
    }
    return found;
}

kiln_err kiln_users_check_dirs(const kiln_users *us, const char *data_dir, char *why, size_t whylen)
{
    char bad[PATH_MAX];
    if (geteuid() != 0) return KILN_OK; /* replicas run as kilnd itself */
    for (size_t i = 0; i < us->n; i++) {
        const kiln_user *u = &us->v[i];
        if (u->uid == 0 || user_of(us, u->project) != u) continue;
        if (!cannot_enter(u, data_dir, bad, sizeof bad)) continue;
        struct stat sb;
        char mode[64] = "";
        if (stat(bad, &sb) == 0)
            snprintf(mode, sizeof mode, " (mode %04o, owner uid %ld)", (unsigned)sb.st_mode & 07777,
                     (long)sb.st_uid);
        snprintf(why, whylen,
                 "project %s's replicas run as user %s ('project %s user %s' in the tokens "
                 "file), who cannot enter %s%s, on the way to their job directories under "
                 "%s/jobs: let the user through (chmod o+x %s, or a group of the user's with "
                 "g+x), or give kilnd a --data-dir that user can reach",
                 u->project, u->user, u->project, u->user, bad, mode, data_dir, bad);
        return KILN_EINVAL;
    }
    return KILN_OK;
}

static void chown_one(const char *path, long uid, long gid)
{
    if (chown(path, (uid_t)uid, (gid_t)gid) < 0 && errno != ENOENT)
        fprintf(stderr, "kilnd: cannot give %s to %ld:%ld: %s\n", path, uid, gid, strerror(errno));
}

void kiln_users_chown_job(const char *job_dir, long uid, long gid)
{
    /* ps.keys too: the job's parameter servers and workers read their CURVE
     * keys from it, and it is 0600 */
    static const char *const subs[] = {"",         "/work",    "/replicas", "/log.tsv",
                                       "/staging", "/ps.keys", NULL};
    char path[PATH_MAX + 16];
    for (size_t i = 0; subs[i]; i++) {
        snprintf(path, sizeof path, "%s%s", job_dir, subs[i]);
        chown_one(path, uid, gid);
    }
}

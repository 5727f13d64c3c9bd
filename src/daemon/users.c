/* src/daemon/users.c - the Unix users that projects' replicas run as.
 *
 * A project names its user next to its tokens ("project P user U [group
 * G]" in the tokens file). kilnd started as root runs a replica as that
 * user; with no user named it would run as root, which it refuses unless
 * the site says so (--allow-root-replicas). kilnd not started as root runs
 * replicas as itself and cannot switch: a project user is then an error, not
 * a silent downgrade. Both are refused when a job is created (src/api), said
 * at start (kilnd_users_report), and checked again at placement for jobs a
 * kilnd with another configuration accepted. */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/kilnd.h"

int kilnd_parse_project_line(kilnd *d, const char *path, int lineno, const char *line)
{
    char proj[128], kw[16], user[64], kw2[16] = "", group[64] = "";
    int n = sscanf(line, "project %127s %15s %63s %15s %63s", proj, kw, user, kw2, group);
    if ((n != 3 && n != 5) || strcmp(kw, "user") != 0 || (n == 5 && strcmp(kw2, "group") != 0)) {
        fprintf(stderr, "kilnd: %s:%d: expected 'project PROJECT user USER [group GROUP]'\n", path,
                lineno);
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
    kilnd_user *nu = realloc(d->users, (d->n_users + 1) * sizeof *nu);
    if (!nu) return -1;
    d->users = nu;
    kilnd_user *u = &d->users[d->n_users++];
    u->project = strdup(proj);
    u->user = strdup(user);
    u->uid = (long)pw->pw_uid;
    u->gid = gid;
    return u->project && u->user ? 0 : -1;
}

/* The line of the tokens file that names `project`'s user (its own, else
 * the first "project * user U"), or NULL. */
static const kilnd_user *user_of(const kilnd *d, const char *project)
{
    for (size_t i = 0; i < d->n_users; i++)
        if (strcmp(d->users[i].project, project) == 0 || strcmp(d->users[i].project, "*") == 0)
            return &d->users[i];
    return NULL;
}

kiln_err kilnd_project_user(const kilnd *d, const char *project, long *uid, long *gid, char *why,
                            size_t whylen)
{
    const kilnd_user *u = user_of(d, project);
    bool root = geteuid() == 0;
    *uid = *gid = -1;
    if (u && !root && (uid_t)u->uid != geteuid()) {
        snprintf(why, whylen,
                 "project %s runs as user %s ('project %s user %s' in the tokens file), and "
                 "kilnd (uid %ld, not root) cannot switch to it: start kilnd as root, or as "
                 "that user",
                 project, u->user, u->project, u->user, (long)geteuid());
        return KILN_EINVAL;
    }
    if (root && (!u || u->uid == 0) && !d->allow_root_replicas) {
        if (u)
            snprintf(why, whylen,
                     "kilnd runs as root and the tokens file runs project %s as root ('project "
                     "%s user %s'): name another user there ('project %s user U'), or, on a "
                     "single-user machine, start kilnd with --allow-root-replicas yes",
                     project, u->project, u->user, project);
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

void kilnd_users_report(const kilnd *d)
{
    bool root = geteuid() == 0, any = false;
    char others[512] = "";
    size_t n = 0;

    for (size_t i = 0; i < d->n_users; i++) {
        const kilnd_user *u = &d->users[i];
        if (user_of(d, u->project) != u) continue; /* shadowed: never used */
        any |= strcmp(u->project, "*") == 0;
        if (strcmp(u->project, "*") != 0 && n < sizeof others)
            n += (size_t)snprintf(others + n, sizeof others - n, "%s%s", n ? ", " : "", u->project);
        if (root && u->uid == 0 && !d->allow_root_replicas)
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
    if (root && !any && !d->allow_root_replicas)
        fprintf(stderr,
                "kilnd: as configured, kilnd will refuse every job of %s%s: it runs as root and "
                "would run their replicas as root. Name each project's user in the tokens file "
                "('project P user U', kilnd --tokens FILE), or, on a single-user machine, start "
                "kilnd with --allow-root-replicas yes (docs/service.md)\n",
                n ? "a project other than " : "every project", others);
}

static void chown_one(const char *path, long uid, long gid)
{
    if (chown(path, (uid_t)uid, (gid_t)gid) < 0 && errno != ENOENT)
        fprintf(stderr, "kilnd: cannot give %s to %ld:%ld: %s\n", path, uid, gid, strerror(errno));
}

void kilnd_chown_job(const char *job_dir, long uid, long gid)
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

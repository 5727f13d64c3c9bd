/* src/store/restore.c - kiln_store_hold and kiln_store_restore
 * (kiln/store.h): `kiln admin restore` and the lock that keeps it off a
 * store that a kilnd is serving.
 *
 * The lock is a flock on PATH-lock, a file of its own: SQLite locks the
 * database with fcntl locks, which flock(2) does not touch on Linux, and
 * where flock is emulated by fcntl (NFS) a lock on kilnd.db itself would
 * collide with SQLite's. kilnd holds it shared for its whole life, so the
 * lock goes when the process does, however it ends (kill -9 included). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/store.h"
#include "store/store_int.h"

/* The files of a store besides the database itself: a WAL or a hot
 * journal left beside a restored copy would be replayed onto it. */
static const char *const sides[] = {"-wal", "-shm", "-journal"};
#define N_SIDES (sizeof sides / sizeof sides[0])

static int open_lock(const char *path, char *lock, size_t cap)
{
    if (snprintf(lock, cap, "%s-lock", path) >= (int)cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* read-only is enough for flock, and lets a kilnd running as the data
     * dir's owner open a lock file that root made for it (see restore) */
    return open(lock, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
}

kiln_err kiln_store_hold(const char *path, int *fd, kiln_diag *d)
{
    char lock[PATH_MAX];
    *fd = open_lock(path, lock, sizeof lock);
    if (*fd < 0) {
        kiln_diag_add(d, "--data-dir", "cannot open the store's lock file '%s-lock': %s", path,
                      strerror(errno));
        return KILN_EIO;
    }
    if (flock(*fd, LOCK_SH | LOCK_NB) == 0) return KILN_OK;
    int e = errno;
    close(*fd);
    *fd = -1;
    if (e == EWOULDBLOCK) {
        kiln_diag_add(d, "--data-dir",
                      "the store '%s' is being restored (kiln admin restore holds '%s'); start "
                      "kilnd once it has finished",
                      path, lock);
        return KILN_ECONFLICT;
    }
    kiln_diag_add(d, "--data-dir", "cannot lock '%s': %s", lock, strerror(e));
    return KILN_EIO;
}

/* Checks that `db` is a whole kiln store of a version this kiln reads. */
static kiln_err check_backup(sqlite3 *db, const char *file, kiln_diag *d)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EINVAL;

    /* a file that is not a database fails here, at the first read */
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        if (sqlite3_errcode(db) == SQLITE_NOTADB)
            kiln_diag_add(d, "FILE", "'%s' is not a SQLite database", file);
        else
            kiln_diag_add(d, "FILE", "cannot read '%s': %s", file, sqlite3_errmsg(db));
        err = KILN_EIO;
        goto out;
    }
    const char *ok = (const char *)sqlite3_column_text(st, 0);
    if (!ok || strcmp(ok, "ok") != 0) {
        kiln_diag_add(d, "FILE", "'%s' fails SQLite's integrity check: %s", file,
                      ok ? ok : "(no answer)");
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    /* what migration 0 creates, which a store of every version holds (one
     * of version 0, from before versions were kept, included) */
    if (sqlite3_prepare_v2(db,
                           "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                           " AND name IN ('jobs', 'nodes')",
                           -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0) != 2) {
        kiln_diag_add(d, "FILE",
                      "'%s' is a SQLite database but not a kiln store (it has no jobs and "
                      "nodes tables)",
                      file);
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    if (v < 0) {
        kiln_diag_add(d, "FILE", "'%s': cannot read its schema version: %s", file,
                      sqlite3_errmsg(db));
        goto out;
    }
    if (v > KILN__STORE_SCHEMA) {
        kiln_diag_add(d, "FILE",
                      "'%s' has schema version %d, written by a newer kiln; this one knows "
                      "versions up to %d",
                      file, v, KILN__STORE_SCHEMA);
        goto out;
    }
    err = KILN_OK;
out:
    sqlite3_finalize(st);
    return err;
}

kiln_err kiln_store_restore(const char *file, const char *path, kiln_store_restore_info *info,
                            kiln_diag *d)
{
    char dir[PATH_MAX], lock[PATH_MAX], staged[PATH_MAX], aside[PATH_MAX], a_store[PATH_MAX];
    char p_side[N_SIDES][PATH_MAX], a_side[N_SIDES][PATH_MAX]; /* PATH-wal, aside/BASE-wal ... */
    const char *base;
    sqlite3 *src = NULL;
    int lfd = -1;
    size_t n_moved = 0;
    bool staged_made = false, linked = false, store_moved = false;
    bool moved[N_SIDES] = {false};
    kiln_err err = KILN_EIO;
    struct stat fs, ds, ss;

    memset(info, 0, sizeof *info);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    errno = 0;
    if (stat(dir, &ds) < 0 || !S_ISDIR(ds.st_mode)) {
        kiln_diag_add(d, "--data-dir", "the data dir '%s' is not a directory: %s", dir,
                      errno ? strerror(errno) : "a file");
        err = KILN_ENOTFOUND;
        goto out;
    }
    if (snprintf(staged, sizeof staged, "%s.restore", path) >= (int)sizeof staged) {
        kiln_diag_add(d, "--data-dir", "the path '%s' is too long", path);
        err = KILN_EINVAL;
        goto out;
    }
    /* exclusive for the whole restore: no kilnd serves the store now, and
     * none starts on it halfway (kiln_store_hold refuses) */
    lfd = open_lock(path, lock, sizeof lock);
    if (lfd < 0) {
        kiln_diag_add(d, "--data-dir", "cannot open the store's lock file '%s-lock': %s", path,
                      strerror(errno));
        goto out;
    }
    if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK) {
            kiln_diag_add(d, "--data-dir",
                          "the data dir '%s' is in use: a kilnd is serving it (it holds '%s'); "
                          "stop kilnd first",
                          dir, lock);
            err = KILN_ECONFLICT;
        } else
            kiln_diag_add(d, "--data-dir", "cannot lock '%s': %s", lock, strerror(errno));
        goto out;
    }
    /* a lock file made here by root stays openable by the data dir's owner */
    if (geteuid() == 0 && fchown(lfd, ds.st_uid, ds.st_gid) < 0) {
        kiln_diag_add(d, "--data-dir", "cannot give '%s' to the data dir's owner: %s", lock,
                      strerror(errno));
        goto out;
    }

    /* FILE, before the store is touched */
    errno = 0;
    if (stat(file, &fs) < 0 || !S_ISREG(fs.st_mode)) {
        kiln_diag_add(d, "FILE", "cannot read the backup '%s': %s", file,
                      errno ? strerror(errno) : "not a file");
        err = KILN_ENOTFOUND;
        goto out;
    }
    bool have_store = stat(path, &ss) == 0;
    if (have_store && ss.st_dev == fs.st_dev && ss.st_ino == fs.st_ino) {
        kiln_diag_add(d, "FILE", "'%s' is the store itself", file);
        err = KILN_EINVAL;
        goto out;
    }
    if (sqlite3_open_v2(file, &src, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        kiln_diag_add(d, "FILE", "cannot open '%s': %s", file,
                      src ? sqlite3_errmsg(src) : "out of memory");
        goto out;
    }
    err = check_backup(src, file, d);
    if (err != KILN_OK) goto out;
    err = KILN_EIO;

    /* staged beside the store: a copy that fails (a full disk) leaves the
     * store as it was. One left by a restore that died is ours to replace */
    unlink(staged);
    staged_made = true;
    if (kiln__store_copy(src, staged, &info->copy, d) != KILN_OK) goto out;
    sqlite3_close(src);
    src = NULL;
    /* kilnd runs as the owner of its data dir, and the copy is 0600 */
    uid_t uid = have_store ? ss.st_uid : ds.st_uid;
    gid_t gid = have_store ? ss.st_gid : ds.st_gid;
    struct stat cs;
    if (stat(staged, &cs) < 0 ||
        ((cs.st_uid != uid || cs.st_gid != gid) && chown(staged, uid, gid) < 0)) {
        kiln_diag_add(d, "--data-dir",
                      "cannot give the restored store '%s' to uid %d gid %d (the owner of the "
                      "store it replaces, else of the data dir): %s; run as that user or root",
                      staged, (int)uid, (int)gid, strerror(errno));
        goto out;
    }

    /* aside: a new directory per restore */
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", gmtime_r(&now, &tm));
    for (int k = 1;; k++) {
        char sfx[16] = "";
        if (k > 1) snprintf(sfx, sizeof sfx, "-%d", k);
        if (snprintf(aside, sizeof aside, "%s/before-restore-%s%s", dir, ts, sfx) >=
            (int)sizeof aside) {
            kiln_diag_add(d, "--data-dir", "the path '%s' is too long", dir);
            goto out;
        }
        if (mkdir(aside, 0700) == 0) break;
        if (errno != EEXIST || k >= 100) {
            kiln_diag_add(d, "--data-dir", "cannot make '%s': %s", aside, strerror(errno));
            goto out;
        }
    }
    snprintf(info->aside, sizeof info->aside, "%s", aside); /* made: removed on a failure */
    if (geteuid() == 0 && chown(info->aside, ds.st_uid, ds.st_gid) < 0) {
        kiln_diag_add(d, "--data-dir", "cannot give '%s' to the data dir's owner: %s", info->aside,
                      strerror(errno));
        goto out;
    }
    bool fits = snprintf(a_store, sizeof a_store, "%s/%s", info->aside, base) < (int)sizeof a_store;
    for (size_t i = 0; i < N_SIDES; i++)
        fits =
            fits &&
            snprintf(p_side[i], sizeof p_side[i], "%s%s", path, sides[i]) < (int)sizeof p_side[i] &&
            snprintf(a_side[i], sizeof a_side[i], "%s/%s%s", info->aside, base, sides[i]) <
                (int)sizeof a_side[i];
    if (!fits) {
        kiln_diag_add(d, "--data-dir", "the path '%s' is too long", info->aside);
        goto out;
    }
    /* the store first as a second name (the data dir is never without a
     * store), then its WAL and journal (which must not meet the copy), then
     * the copy over the store's name in one rename */
    if (have_store) {
        if (link(path, a_store) == 0)
            linked = true;
        else if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP) {
            kiln_diag_add(d, "--data-dir", "cannot keep '%s' as '%s': %s", path, a_store,
                          strerror(errno));
            goto out;
        }
    }
    for (size_t i = 0; i < N_SIDES; i++) {
        if (rename(p_side[i], a_side[i]) == 0) {
            moved[i] = true;
            n_moved++;
        } else if (errno != ENOENT) {
            kiln_diag_add(d, "--data-dir", "cannot move '%s' to '%s': %s", p_side[i], a_side[i],
                          strerror(errno));
            goto out;
        }
    }
    if (have_store && !linked) {
        /* no hard links here: a plain move, and a moment without a store */
        if (rename(path, a_store) < 0) {
            kiln_diag_add(d, "--data-dir", "cannot move '%s' to '%s': %s", path, a_store,
                          strerror(errno));
            goto out;
        }
        store_moved = true;
    }
    if (rename(staged, path) < 0) {
        kiln_diag_add(d, "--data-dir", "cannot rename '%s' to '%s': %s", staged, path,
                      strerror(errno));
        goto out;
    }
    staged_made = false;
    info->replaced = have_store;
    kiln__store_fsync_path(dir, O_RDONLY | O_DIRECTORY);
    kiln__store_fsync_path(info->aside, O_RDONLY | O_DIRECTORY);
    size_t off = 0;
    if (have_store) off += (size_t)snprintf(info->moved, sizeof info->moved, "%s", base);
    for (size_t i = 0; i < N_SIDES && off < sizeof info->moved; i++)
        if (moved[i])
            off += (size_t)snprintf(info->moved + off, sizeof info->moved - off, "%s%s",
                                    off ? " " : "", sides[i]);
    if (!have_store && !n_moved) {
        rmdir(info->aside); /* nothing was there: an empty directory says nothing */
        info->aside[0] = '\0';
    }
    err = KILN_OK;
out:
    if (err != KILN_OK && info->aside[0]) {
        /* put back what was moved: the data dir as it was */
        if (store_moved) rename(a_store, path);
        for (size_t i = 0; i < N_SIDES; i++)
            if (moved[i]) rename(a_side[i], p_side[i]);
        if (linked) unlink(a_store); /* the second name only: the store stayed in place */
        rmdir(info->aside);          /* empty now, or it stays */
        info->aside[0] = '\0';
    }
    if (src) sqlite3_close(src);
    if (staged_made) unlink(staged);
    if (lfd >= 0) close(lfd);
    return err;
}

/* src/store/backup.c - kiln_store_backup (kiln/store.h): `kiln admin
 * backup`'s copy of a store that kilnd may be serving from. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/store.h"
#include "store/store_int.h"

/* How long a busy source (a kilnd checkpointing, a migration) may hold the
 * copy off before it gives up. */
#define BACKUP_BUSY_MS 10000

static long long one_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

int kiln__store_fsync_path(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

kiln_err kiln__store_copy(sqlite3 *from, const char *dest, kiln_store_backup_info *info,
                          kiln_diag *d)
{
    sqlite3 *to = NULL;
    sqlite3_backup *b = NULL;
    sqlite3_stmt *st = NULL;
    char tmp[PATH_MAX], dir[PATH_MAX];
    kiln_err err = KILN_EIO;
    bool made = false;
    struct stat sb;

    memset(info, 0, sizeof *info);
    if (snprintf(tmp, sizeof tmp, "%s.tmp", dest) >= (int)sizeof tmp) {
        kiln_diag_add(d, "FILE", "the path '%s' is too long", dest);
        err = KILN_EINVAL;
        goto out;
    }
    if (lstat(dest, &sb) == 0) {
        kiln_diag_add(d, "FILE", "'%s' exists: a backup never replaces a file", dest);
        err = KILN_EEXIST;
        goto out;
    }
    unlink(tmp); /* a leftover of a backup that died */
    if (sqlite3_open_v2(tmp, &to, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        kiln_diag_add(d, "FILE", "cannot create '%s': %s", tmp,
                      to ? sqlite3_errmsg(to) : "out of memory");
        goto out;
    }
    made = true;
    /* the store holds the page-token key and every job's spec: the kiln
     * user's alone, as the data dir is */
    if (chmod(tmp, 0600) < 0) {
        kiln_diag_add(d, "FILE", "cannot make '%s' private: %s", tmp, strerror(errno));
        goto out;
    }
    b = sqlite3_backup_init(to, "main", from, "main");
    if (!b) goto to_err;
    /* every page in one step: one read transaction, one commit's store */
    int rc;
    for (int waited = 0;; waited += 50) {
        rc = sqlite3_backup_step(b, -1);
        if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || waited >= BACKUP_BUSY_MS) break;
        sqlite3_sleep(50);
    }
    if (rc != SQLITE_DONE) {
        kiln_diag_add(d, "--data-dir", "copying the store: %s", sqlite3_errstr(rc));
        goto out;
    }
    rc = sqlite3_backup_finish(b);
    b = NULL;
    if (rc != SQLITE_OK) goto to_err;
    /* the copy carries the source's WAL flag: make it one plain file */
    if (sqlite3_exec(to, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL) != SQLITE_OK) goto to_err;
    if (sqlite3_prepare_v2(to, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW)
        goto to_err;
    if (strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0) {
        kiln_diag_add(d, "FILE", "the copy fails SQLite's integrity check: %s",
                      (const char *)sqlite3_column_text(st, 0));
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    info->schema = (int)one_int(to, "PRAGMA user_version");
    info->jobs = one_int(to, "SELECT count(*) FROM jobs");
    if (sqlite3_close(to) != SQLITE_OK) goto to_err;
    to = NULL;
    if (kiln__store_fsync_path(tmp, O_RDONLY) < 0 || rename(tmp, dest) < 0) {
        kiln_diag_add(d, "FILE", "cannot write '%s': %s", dest, strerror(errno));
        goto out;
    }
    made = false;
    /* the rename itself, durable: the directory's entry */
    snprintf(dir, sizeof dir, "%s", dest);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    kiln__store_fsync_path(dir, O_RDONLY | O_DIRECTORY);
    if (stat(dest, &sb) == 0) info->bytes = (long long)sb.st_size;
    err = KILN_OK;
    goto out;
to_err:
    kiln_diag_add(d, "FILE", "writing '%s': %s", tmp, to ? sqlite3_errmsg(to) : "out of memory");
out:
    sqlite3_finalize(st);
    if (b) sqlite3_backup_finish(b);
    if (to) sqlite3_close(to);
    if (made) unlink(tmp);
    return err;
}

kiln_err kiln_store_backup(const char *src, const char *dest, kiln_store_backup_info *info,
                           kiln_diag *d)
{
    sqlite3 *from = NULL;
    kiln_err err = KILN_EIO;

    memset(info, 0, sizeof *info);
    /* READWRITE, not CREATE: a WAL reader maps the -shm file, and a missing
     * store is an error, not a new empty one */
    if (sqlite3_open_v2(src, &from, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        kiln_diag_add(d, "--data-dir", "cannot open the store '%s': %s", src,
                      from ? sqlite3_errmsg(from) : "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(from, BACKUP_BUSY_MS);
    int v = (int)one_int(from, "PRAGMA user_version");
    if (v < 0 || v > KILN__STORE_SCHEMA) {
        if (v < 0)
            kiln_diag_add(d, "--data-dir", "'%s' is not a kiln store: %s", src,
                          sqlite3_errmsg(from));
        else
            kiln_diag_add(d, "--data-dir", "'%s' has schema version %d, newer than this kiln's %d",
                          src, v, KILN__STORE_SCHEMA);
        err = KILN_EINVAL;
        goto out;
    }
    err = kiln__store_copy(from, dest, info, d);
out:
    if (from) sqlite3_close(from);
    return err;
}

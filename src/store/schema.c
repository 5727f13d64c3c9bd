/* src/store/schema.c - the store's schema and its migrations (store_int.h).
 *
 * PRAGMA user_version numbers the schema. Each migration takes a store from
 * version i to i + 1; opening runs the missing ones in one transaction, so
 * a data dir written by an older kilnd opens (and is upgraded) and a crash
 * mid-migration leaves the old version whole. A store of a newer version is
 * refused rather than misread. Stores from before versions were kept have
 * version 0 and already hold what migration 0 creates (hence IF NOT EXISTS).
 *
 * Before an existing store is migrated, a copy of it as it was is made
 * beside it (PATH.pre-upgrade-vN, mode 0600, SQLite's online backup, just
 * before the migration's write lock) and removed once the migration has
 * committed: a migration that fails leaves the store as it was (the
 * transaction) and the copy (for the operator; docs/install.md,
 * "Upgrades"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "store/store_int.h"

static const char *const migrations[KILN__STORE_SCHEMA] = {
    /* 0 -> 1: jobs, the queue's index, node cordons */
    "CREATE TABLE IF NOT EXISTS jobs("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " project TEXT NOT NULL, job_id TEXT NOT NULL, spec TEXT NOT NULL,"
    " state INTEGER NOT NULL, priority INTEGER NOT NULL,"
    " create_ns INTEGER NOT NULL, start_ns INTEGER NOT NULL DEFAULT 0,"
    " end_ns INTEGER NOT NULL DEFAULT 0, error TEXT, version INTEGER NOT NULL DEFAULT 1,"
    " restarts INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0, runtime TEXT,"
    " UNIQUE(project, job_id));"
    "CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(state, priority DESC, create_ns);"
    "CREATE TABLE IF NOT EXISTS nodes(name TEXT PRIMARY KEY, cordoned INTEGER NOT NULL);",

    /* 1 -> 2: a list page costs the page, not the store. Pages walk
     * (project, seq); a state filter walks (project, state, seq); a label
     * filter walks job_labels by (project, key, value, seq), a copy of the
     * labels kept in step with the spec (filled here from the specs of the
     * jobs already stored). meta holds the secret page tokens are signed
     * with (SQLite's randomblob: its PRNG is seeded from the OS). */
    "CREATE INDEX jobs_page ON jobs(project, seq);"
    "CREATE INDEX jobs_state ON jobs(project, state, seq);"
    "CREATE TABLE job_labels(project TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
    " seq INTEGER NOT NULL, PRIMARY KEY(project, key, value, seq)) WITHOUT ROWID;"
    "CREATE INDEX job_labels_seq ON job_labels(seq);"
    "INSERT INTO job_labels(project, key, value, seq)"
    " SELECT j.project, l.key, l.value, j.seq FROM jobs j, json_each(j.spec, '$.labels') l"
    " WHERE l.type = 'text';"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);"
    "INSERT INTO meta(key, value) VALUES ('token_key', randomblob(32));",

    /* 2 -> 3: documents of other resources (notebook instances and their
     * operations), JSON text by kind, project and name */
    "CREATE TABLE docs(kind TEXT NOT NULL, project TEXT NOT NULL, name TEXT NOT NULL,"
    " body TEXT NOT NULL, PRIMARY KEY(kind, project, name)) WITHOUT ROWID;",
};

int kiln_store_schema_version(void)
{
    return KILN__STORE_SCHEMA;
}

static int user_version(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Does the store hold anything yet (a version 0 store from before
 * versions were kept does; a new file does not)? */
static bool has_tables(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    bool any = false;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master LIMIT 1", -1, &st, NULL) == SQLITE_OK)
        any = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return any;
}

kiln_err kiln__store_schema(sqlite3 *db, const char *path, kiln_diag *d)
{
    char *msg = NULL, sql[64], copy[4096] = "";
    kiln_err err = KILN_EIO;
    bool began = false;

    int v0 = user_version(db);
    if (v0 >= 0 && v0 < KILN__STORE_SCHEMA && strcmp(path, ":memory:") != 0 && has_tables(db)) {
        /* an upgrade: the copy first, before the write lock (a backup cannot
         * read through this connection's own write transaction); nothing
         * else writes a store that kilnd is opening. One left by an upgrade
         * that failed is the same store (that migration rolled back): it
         * stays */
        kiln_store_backup_info info;
        kiln_diag cd = KILN_DIAG_INIT;
        snprintf(copy, sizeof copy, "%s.pre-upgrade-v%d", path, v0);
        kiln_err ce = kiln__store_copy(db, copy, &info, &cd);
        if (ce != KILN_OK && ce != KILN_EEXIST) {
            kiln_diag_add(d, "--data-dir",
                          "not upgrading the store '%s' from schema version %d to %d: its copy "
                          "'%s' could not be made (%s)",
                          path, v0, KILN__STORE_SCHEMA, copy,
                          cd.n ? cd.v[0].description : kiln_err_str(ce));
            kiln_diag_free(&cd);
            err = KILN_EIO;
            copy[0] = '\0';
            goto out_quiet;
        }
        kiln_diag_free(&cd);
    }
    /* IMMEDIATE: two kilnds opening one store at once migrate one after the other */
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) goto out;
    began = true;
    int v = user_version(db);
    if (v < 0) goto out;
    if (v > KILN__STORE_SCHEMA) {
        kiln_diag_add(d, "--data-dir",
                      "the store '%s' has schema version %d, written by a newer kilnd; this one "
                      "knows versions up to %d",
                      path, v, KILN__STORE_SCHEMA);
        err = KILN_EINVAL;
        goto out;
    }
    for (int i = v; i < KILN__STORE_SCHEMA; i++)
        if (sqlite3_exec(db, migrations[i], NULL, NULL, &msg) != SQLITE_OK) goto out;
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", KILN__STORE_SCHEMA);
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) goto out;
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) goto out;
    began = false;
    err = KILN_OK;
    if (copy[0]) unlink(copy); /* committed: the upgraded store stands on its own */
out:
    if (err == KILN_EIO)
        kiln_diag_add(d, "--data-dir", "cannot initialise the store '%s': %s%s%s%s", path,
                      msg ? msg : sqlite3_errmsg(db),
                      copy[0] ? " (its copy from before the "
                                "upgrade is kept: '"
                              : "",
                      copy, copy[0] ? "')" : "");
out_quiet:
    if (began) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_free(msg);
    return err;
}

kiln_err kiln__store_secret(sqlite3 *db, unsigned char key[32])
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'token_key'", -1, &st, NULL) !=
            SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW || sqlite3_column_bytes(st, 0) != 32)
        goto out;
    memcpy(key, sqlite3_column_blob(st, 0), 32);
    err = KILN_OK;
out:
    sqlite3_finalize(st);
    return err;
}

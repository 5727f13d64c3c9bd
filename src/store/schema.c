/* src/store/schema.c - the store's schema and its migrations (store_int.h).
 *
 * PRAGMA user_version numbers the schema. Each migration takes a store from
 * version i to i + 1; opening runs the missing ones in one transaction, so
 * a data dir written by an older kilnd opens (and is upgraded) and a crash
 * mid-migration leaves the old version whole. A store of a newer version is
 * refused rather than misread. Stores from before versions were kept have
 * version 0 and already hold what migration 0 creates (hence IF NOT EXISTS). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

kiln_err kiln__store_schema(sqlite3 *db, const char *path, kiln_diag *d)
{
    char *msg = NULL, sql[64];
    kiln_err err = KILN_EIO;
    bool began = false;

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
out:
    if (err == KILN_EIO)
        kiln_diag_add(d, "--data-dir", "cannot initialise the store '%s': %s", path,
                      msg ? msg : sqlite3_errmsg(db));
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

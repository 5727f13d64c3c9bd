/* src/cli/admin.c - `kiln admin`: operating a kilnd's data on its own
 * machine. `kiln admin backup FILE` copies the store directly (not through
 * kilnd's API): it works whether kilnd is serving or stopped, needs no
 * token, and needs read and write access to the data dir (the -shm file of
 * SQLite's WAL), i.e. the kiln user or root. `kiln admin restore FILE` puts
 * such a copy in place of the store, with kilnd stopped (kiln_store_restore
 * checks that); docs/install.md, "Backups". */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/store.h"

static const char usage[] =
    "usage: kiln admin backup FILE [--data-dir DIR]\n"
    "       kiln admin restore FILE [--data-dir DIR]\n"
    "\n"
    "backup copies kilnd's store (DIR/kilnd.db; DIR defaults to kilnd's own\n"
    "default, ./var) to FILE with SQLite's online backup: a consistent copy as of\n"
    "one commit, taken while kilnd goes on serving. FILE must not exist. The copy\n"
    "is checked (integrity_check) before it is renamed into place.\n"
    "\n"
    "restore puts the backup FILE in place of DIR/kilnd.db, with kilnd stopped\n"
    "(refused while a kilnd serves DIR). FILE must pass SQLite's integrity check\n"
    "and be a kiln store of a schema version this kiln knows (an older one is\n"
    "upgraded by kilnd at start). The store it replaces, with its -wal and -shm\n"
    "files, is moved to DIR/before-restore-TIMESTAMP/, never deleted.\n"
    "docs/install.md, \"Backups\".\n";

/* The two verbs' one command line: FILE [--data-dir DIR]; *dir gets DIR,
 * store DIR/kilnd.db. false (said on stderr, naming VERB) on anything else. */
static bool admin_args(const char *verb, int argc, char **argv, const char **file, const char **dir,
                       char *store, size_t len)
{
    const char *data_dir = "./var";
    *file = NULL;
    *dir = data_dir;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--data-dir") == 0 && i + 1 < argc)
            *dir = data_dir = argv[++i];
        else if (argv[i][0] != '-' && !*file)
            *file = argv[i];
        else {
            fprintf(stderr, "kiln admin %s: unexpected '%s'\n%s", verb, argv[i], usage);
            return false;
        }
    }
    if (!*file || !**file) {
        fprintf(stderr, "kiln admin %s: FILE is missing\n%s", verb, usage);
        return false;
    }
    if (snprintf(store, len, "%s/kilnd.db", data_dir) >= (int)len) {
        fprintf(stderr, "kiln admin %s: --data-dir is too long\n", verb);
        return false;
    }
    return true;
}

static int backup(int argc, char **argv)
{
    const char *file = NULL, *data_dir = NULL;
    char src[4096];
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_store_backup_info info;
    int rc = 1;

    if (!admin_args("backup", argc, argv, &file, &data_dir, src, sizeof src)) goto out;
    if (kiln_store_backup(src, file, &info, &dg) != KILN_OK) {
        fprintf(stderr, "kiln admin backup: failed:\n");
        kiln_diag_print(&dg, stderr);
        goto out;
    }
    printf("kiln admin backup: %s -> %s: schema version %d, %lld job%s, %lld bytes\n", src, file,
           info.schema, info.jobs, info.jobs == 1 ? "" : "s", info.bytes);
    rc = 0;
out:
    kiln_diag_free(&dg);
    return rc;
}

static int restore(int argc, char **argv)
{
    const char *file = NULL, *data_dir = NULL;
    char store[4096];
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_store_restore_info info;
    int rc = 1;

    if (!admin_args("restore", argc, argv, &file, &data_dir, store, sizeof store)) goto out;
    if (kiln_store_restore(file, store, &info, &dg) != KILN_OK) {
        fprintf(stderr, "kiln admin restore: refused, nothing changed:\n");
        kiln_diag_print(&dg, stderr);
        goto out;
    }
    printf("kiln admin restore: %s -> %s: schema version %d, %lld job%s, %lld bytes\n", file, store,
           info.copy.schema, info.copy.jobs, info.copy.jobs == 1 ? "" : "s", info.copy.bytes);
    if (info.copy.schema < kiln_store_schema_version())
        printf("schema version %d is older than this kiln's %d: kilnd upgrades it when it "
               "starts, keeping a copy as it was (%s.pre-upgrade-v%d)\n",
               info.copy.schema, kiln_store_schema_version(), store, info.copy.schema);
    if (info.aside[0]) printf("moved aside (%s) to %s/\n", info.moved, info.aside);
    if (info.replaced)
        printf("to undo, with kilnd stopped: kiln admin restore %s/kilnd.db --data-dir %s\n",
               info.aside, data_dir);
    else
        printf("there was no store to replace\n");
    rc = 0;
out:
    kiln_diag_free(&dg);
    return rc;
}

int kiln_cli_admin(int argc, char **argv)
{
    bool verb = argc >= 2 && (strcmp(argv[1], "backup") == 0 || strcmp(argv[1], "restore") == 0);
    if (verb && kiln_cli_wants_help(argc - 2, argv + 2)) {
        kiln_cli_sub_usage(
            usage, strcmp(argv[1], "backup") == 0 ? "kiln admin backup" : "kiln admin restore",
            stdout);
        return 0;
    }
    if (kiln_cli_wants_help(argc - 1, argv + 1) || argc < 2 || strcmp(argv[1], "help") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    if (strcmp(argv[1], "backup") == 0) return backup(argc - 1, argv + 1);
    if (strcmp(argv[1], "restore") == 0) return restore(argc - 1, argv + 1);
    fprintf(stderr, "kiln admin: unknown command '%s'\n%s", argv[1], usage);
    return 1;
}

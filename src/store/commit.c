/* src/store/commit.c - group commit over SQLite's WAL (store_int.h).
 *
 * The connection commits with synchronous=NORMAL: a commit is appended to
 * the WAL and is in the OS when sqlite3_step returns (it survives kill -9),
 * but not yet on disk. Durability against a power cut is one fdatasync of
 * the WAL file, and one fdatasync covers every commit appended before it
 * started. So writers take a ticket under the store's lock (tickets follow
 * commit order), drop the lock, and wait here: the first waiter becomes the
 * leader and syncs for everyone committed so far; writers arriving during
 * that sync wait for the next one, which a single leader again does for
 * all of them. Under load, N writers pay for about two syncs, not N.
 *
 * Why syncing the WAL is enough: SQLite's checkpoint (with NORMAL) syncs the
 * WAL before copying pages into the database and syncs the database before
 * the WAL may be reused, so a commit whose WAL frames are on disk is on disk
 * either way. fdatasync on our own descriptor flushes the file's pages
 * whichever descriptor wrote them (they are the inode's), and it covers the
 * file's growth. The WAL keeps its inode while any connection is open. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store_int.h"

kiln_err kiln__gcommit_init(kiln__gcommit *g, const char *db_path)
{
    memset(g, 0, sizeof *g);
    g->fd = -1;
    size_t n = strlen(db_path) + sizeof "-wal";
    if (!(g->wal_path = malloc(n))) return KILN_ENOMEM;
    snprintf(g->wal_path, n, "%s-wal", db_path);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return KILN_OK;
}

void kiln__gcommit_destroy(kiln__gcommit *g)
{
    if (!g->wal_path) return;
    if (g->fd >= 0) close(g->fd);
    free(g->wal_path);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    g->wal_path = NULL;
}

uint64_t kiln__gcommit_ticket(kiln__gcommit *g)
{
    pthread_mutex_lock(&g->mu);
    uint64_t t = ++g->committed;
    pthread_mutex_unlock(&g->mu);
    return t;
}

kiln_err kiln__gcommit_wait(kiln__gcommit *g, uint64_t ticket)
{
    kiln_err err = KILN_OK;

    pthread_mutex_lock(&g->mu);
    while (g->durable < ticket) {
        /* A failed sync fails every commit it covered, and every later one:
         * Linux reports a writeback error once per open file, so a second
         * fdatasync may "succeed" with the pages of the first lost, and a
         * WAL frame is only read back after recovery when every frame before
         * it is intact. Nothing after the failure can be called durable. */
        if (g->err) {
            err = KILN_EIO;
            break;
        }
        if (g->flushing) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        /* lead: everything committed until now rides on this sync */
        uint64_t upto = g->committed;
        g->flushing = true;
        if (g->fd < 0) g->fd = open(g->wal_path, O_RDONLY | O_CLOEXEC);
        int fd = g->fd;
        pthread_mutex_unlock(&g->mu);
        int rc = fd < 0 ? -1 : fdatasync(fd);
        int e = rc == 0 ? 0 : (errno ? errno : EIO);
        pthread_mutex_lock(&g->mu);
        g->flushing = false;
        g->flushes++;
        if (rc == 0) {
            g->durable = upto;
        } else {
            g->err = e;
            /* once, in kilnd's log: what failed and what to do */
            fprintf(stderr,
                    "kiln store: cannot sync %s to disk (%s%s): the writes since the last "
                    "good sync may be lost at a power cut, and every write now fails; check "
                    "the disk (dmesg, df), then restart kilnd\n",
                    g->wal_path, fd < 0 ? "open: " : "", strerror(e));
        }
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return err;
}

bool kiln__gcommit_failed(kiln__gcommit *g)
{
    pthread_mutex_lock(&g->mu);
    bool failed = g->err != 0;
    pthread_mutex_unlock(&g->mu);
    return failed;
}

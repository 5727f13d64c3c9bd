/* src/util/doorbell.h - how work is handed to a thread that polls: whoever
 * has something for it (kilnd's API threads after a create, a cancel or a
 * drain; a package fetch that ended; a signal handler) rings the doorbell,
 * and the thread, which polls its fd with its own timeout, wakes and looks.
 * No caller climbs back up into kilnd's main module to do it (issue 31):
 * kilnd's main only opens the doorbell and hands it to the supervisor.
 * A ring is one byte in a non-blocking pipe; a full pipe already holds a
 * wake-up, so a ring never blocks and is async-signal-safe. */
#ifndef KILN_UTIL_DOORBELL_H
#define KILN_UTIL_DOORBELL_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_doorbell {
    int fd[2]; /* -1, -1 while closed */
} kiln_doorbell;

/* Opens it (close-on-exec, non-blocking); -1 with errno. */
int kiln_doorbell_open(kiln_doorbell *b);
void kiln_doorbell_close(kiln_doorbell *b);
/* Wakes the thread that polls kiln_doorbell_fd. */
void kiln_doorbell_ring(const kiln_doorbell *b);
/* The fd to poll for POLLIN, and the write end (for helpers that ring by fd). */
int kiln_doorbell_fd(const kiln_doorbell *b);
int kiln_doorbell_ring_fd(const kiln_doorbell *b);
/* Forgets the rings so far (after waking). */
void kiln_doorbell_drain(const kiln_doorbell *b);

#ifdef __cplusplus
}
#endif
#endif

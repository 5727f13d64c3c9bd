/* src/util/doorbell.c - a wake-up for a polling thread (util/doorbell.h). */
#include "util/doorbell.h"

#include <fcntl.h>
#include <unistd.h>

int kiln_doorbell_open(kiln_doorbell *b)
{
    b->fd[0] = b->fd[1] = -1;
    return pipe2(b->fd, O_CLOEXEC | O_NONBLOCK);
}

void kiln_doorbell_close(kiln_doorbell *b)
{
    for (int i = 0; i < 2; i++) {
        if (b->fd[i] >= 0) close(b->fd[i]);
        b->fd[i] = -1;
    }
}

void kiln_doorbell_ring(const kiln_doorbell *b)
{
    char c = 1;
    ssize_t w = write(b->fd[1], &c, 1);
    (void)w; /* a full pipe already holds a wake-up */
}

int kiln_doorbell_fd(const kiln_doorbell *b)
{
    return b->fd[0];
}

int kiln_doorbell_ring_fd(const kiln_doorbell *b)
{
    return b->fd[1];
}

void kiln_doorbell_drain(const kiln_doorbell *b)
{
    char buf[256];
    while (read(b->fd[0], buf, sizeof buf) > 0) {
    }
}

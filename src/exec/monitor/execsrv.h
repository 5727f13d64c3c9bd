/* src/exec/monitor/execsrv.h - a replica monitor's exec service: how
 * kiln-mpi-agent, the rsh agent an MPIJob's launcher runs in the place of
 * ssh, starts a command in a worker replica's container.
 *
 * The worker's kiln-monitor listens on a Unix socket (J/mpi/hosts/HOST.sock,
 * in the job directory every replica's container mounts at the same path).
 * The agent connects, sends the command line, and with it its own stdin,
 * stdout and stderr (SCM_RIGHTS); the monitor runs `podman exec -i NAME
 * /bin/sh -c LINE` with those descriptors, as sshd runs a command with the
 * connection's, and answers with its exit status. The launcher's mpirun thus
 * reads and writes the remote daemons as it would through ssh, and nothing
 * of podman is needed in the launcher's image.
 *
 * The protocol, one request per connection:
 *   agent -> monitor  "KILNX1 LEN\n" then LEN bytes of the command line; the
 *                     three descriptors ride on the first byte
 *   agent -> monitor  "signal N\n" any number of times after: sent on to
 *                     the exec's process group (the agent got SIGTERM...)
 *   monitor -> agent  "exit N\n" when the command ended (128 + N: signal N;
 *                     255: the replica ended first, its ranks with it)
 * A connection that closes before "exit" kills the command, as sshd does
 * when its client goes. Only a peer of the container's user (or root) is
 * served (SO_PEERCRED). */
#ifndef KILN_EXEC_MONITOR_EXECSRV_H
#define KILN_EXEC_MONITOR_EXECSRV_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/un.h>

#define KILN_XSRV_MAGIC    "KILNX1"
#define KILN_XSRV_LINE_MAX (256 * 1024) /* a command line past this is refused */

typedef struct kiln_xsrv kiln_xsrv;

/* The socket address of `path`, which may be longer than sun_path holds
 * (a job directory deep in the data dir): then by its directory's
 * descriptor, /proc/self/fd/N/NAME, with *dirfd that descriptor for the
 * caller to close after bind or connect (-1 when none was needed). The
 * server and kiln-mpi-agent both use it. false when no address can be made. */
bool kiln_xsrv_addr(const char *path, struct sockaddr_un *sa, int *dirfd);

/* Listens on `path` (replacing a socket left there); each request runs
 * argv (NULL-terminated: `podman exec -i NAME`) then "/bin/sh" "-c" LINE.
 * Peers of uid `uid` and root are served. NULL, with why, on failure. */
kiln_xsrv *kiln_xsrv_open(const char *path, char *const *argv, long uid, char *why, size_t whylen);
/* The descriptors to poll for (POLLIN): at most cap, their count. */
size_t kiln_xsrv_pollfds(const kiln_xsrv *x, struct pollfd *pf, size_t cap);
/* Accepts, reads what agents sent, reaps ended commands and answers them.
 * Never blocks for long (a request's line is read with a 2 s timeout). */
void kiln_xsrv_tick(kiln_xsrv *x);
/* The replica ended: every running command is killed and answered 255,
 * the socket removed. NULL is fine. */
void kiln_xsrv_close(kiln_xsrv *x);

#endif

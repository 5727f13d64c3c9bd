/* src/util/caps.h - Linux capability names as Kubernetes' securityContext
 * writes them (CHOWN, NET_RAW, ... or with CAP_; ALL), one table for the
 * create-time check (src/catalog/honoured.c) and for the monitor that drops
 * them from a process replica's bounding set (src/exec/monitor). */
#ifndef KILN_UTIL_CAPS_H
#define KILN_UTIL_CAPS_H

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CAP_ALL (-2) /* "ALL": every capability */

/* The capability number (linux/capability.h) of `name`, KILN_CAP_ALL for
 * ALL, -1 for a name Linux does not have. */
int kiln_cap_number(const char *name);

#ifdef __cplusplus
}
#endif
#endif

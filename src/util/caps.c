/* src/util/caps.c - capability names (caps.h). The table's index is the
 * capability's number in linux/capability.h (CAP_CHOWN 0 ... CAP_CHECKPOINT_
 * RESTORE 40), so a name needs no header of a particular kernel's. */
#include "util/caps.h"

#include <string.h>

static const char *const cap_names[] = {"CHOWN",
                                        "DAC_OVERRIDE",
                                        "DAC_READ_SEARCH",
                                        "FOWNER",
                                        "FSETID",
                                        "KILL",
                                        "SETGID",
                                        "SETUID",
                                        "SETPCAP",
                                        "LINUX_IMMUTABLE",
                                        "NET_BIND_SERVICE",
                                        "NET_BROADCAST",
                                        "NET_ADMIN",
                                        "NET_RAW",
                                        "IPC_LOCK",
                                        "IPC_OWNER",
                                        "SYS_MODULE",
                                        "SYS_RAWIO",
                                        "SYS_CHROOT",
                                        "SYS_PTRACE",
                                        "SYS_PACCT",
                                        "SYS_ADMIN",
                                        "SYS_BOOT",
                                        "SYS_NICE",
                                        "SYS_RESOURCE",
                                        "SYS_TIME",
                                        "SYS_TTY_CONFIG",
                                        "MKNOD",
                                        "LEASE",
                                        "AUDIT_WRITE",
                                        "AUDIT_CONTROL",
                                        "SETFCAP",
                                        "MAC_OVERRIDE",
                                        "MAC_ADMIN",
                                        "SYSLOG",
                                        "WAKE_ALARM",
                                        "BLOCK_SUSPEND",
                                        "AUDIT_READ",
                                        "PERFMON",
                                        "BPF",
                                        "CHECKPOINT_RESTORE"};

int kiln_cap_number(const char *name)
{
    if (!name) return -1;
    if (strcmp(name, "ALL") == 0) return KILN_CAP_ALL;
    if (strncmp(name, "CAP_", 4) == 0 && strcmp(name, "CAP_ALL") != 0) name += 4;
    for (int i = 0; i < (int)(sizeof cap_names / sizeof *cap_names); i++)
        if (strcmp(name, cap_names[i]) == 0) return i;
    return -1;
}

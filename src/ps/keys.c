/* src/ps/keys.c - kiln_ps_keys_load (kiln/ps.h): the CURVE keys kilnd hands
 * a job attempt's replicas (src/exec/supervisor/pskeys.h has the format). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln/ps.h"

int kiln_ps_keys_load(const char *path, kiln_ps_keys *k, char *err, size_t errlen)
{
    char name[32], key[64], line[128];
    int rc = -1, got = 0;
    struct stat st;
    FILE *f = fopen(path, "r");
    memset(k, 0, sizeof *k);
    if (!f) {
        snprintf(err, errlen, "cannot read the ps key file %s", path);
        return -1;
    }
    if (fstat(fileno(f), &st) != 0 || (st.st_mode & 0077)) {
        snprintf(err, errlen, "the ps key file %s is readable by others", path);
        goto out;
    }
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%31s %63s", name, key) != 2 || strlen(key) != 40) {
            snprintf(err, errlen, "%s: expected 'NAME KEY' with a 40-character Z85 key", path);
            goto out;
        }
        char *slot = strcmp(name, "server_public") == 0   ? k->server_public
                     : strcmp(name, "server_secret") == 0 ? k->server_secret
                     : strcmp(name, "client_public") == 0 ? k->client_public
                     : strcmp(name, "client_secret") == 0 ? k->client_secret
                                                          : NULL;
        if (!slot) {
            snprintf(err, errlen, "%s: unknown key '%s'", path, name);
            goto out;
        }
        memcpy(slot, key, 41);
        got++;
    }
    if (got != 4 || !k->server_public[0] || !k->server_secret[0] || !k->client_public[0] ||
        !k->client_secret[0]) {
        snprintf(err, errlen,
                 "%s: wants server_public, server_secret, client_public, client_secret", path);
        goto out;
    }
    rc = 0;
out:
    memset(line, 0, sizeof line);
    memset(key, 0, sizeof key);
    fclose(f);
    return rc;
}

/* src/cli/cli_tokens.c - `kiln tokens new`: a fresh bearer token for kilnd's
 * tokens file, shown once, with the hashed line that kilnd keeps instead
 * (as GitHub shows a personal access token once and stores its hash). */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "cli/cli.h"
#include "util/base64.h"
#include "util/hex.h"

static const char usage[] =
    "usage: kiln tokens new --project P|'*' --role viewer|editor\n"
    "\n"
    "Prints a new random token (32 bytes from getrandom, URL-safe base64) and the\n"
    "line to add to kilnd's tokens file, which holds only the token's SHA-256.\n"
    "The token is not stored anywhere: copy it now. SIGHUP makes kilnd read the\n"
    "file again.\n";

static int fill_random(unsigned char *b, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = getrandom(b + got, n - got, 0);
        if (k < 0) return -1; /* EINTR included: a short, rare failure, said below */
        got += (size_t)k;
    }
    return 0;
}

int kiln_cli_tokens(int argc, char **argv)
{
    const char *project = NULL, *role = NULL;
    unsigned char raw[32], hash[32];
    unsigned hl = sizeof hash;
    char token[80], hex[65];
    int rc = 1;

    /* `kiln tokens --help` and `kiln tokens new --help` alike */
    if (kiln_cli_wants_help(argc - 1, argv + 1) || (argc >= 2 && strcmp(argv[1], "help") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "new") != 0) goto bad;
    for (int i = 2; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--project") == 0)
            project = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--role") == 0)
            role = argv[++i];
        else
            goto bad;
    }
    if (!project || !*project || strspn(project, " \t\r\n#") || strpbrk(project, " \t\r\n") ||
        !role || (strcmp(role, "viewer") != 0 && strcmp(role, "editor") != 0))
        goto bad;
    if (fill_random(raw, sizeof raw) < 0) {
        perror("kiln tokens: getrandom");
        goto out;
    }
    /* "kiln_": a token found in a paste or a log says what it is */
    memcpy(token, "kiln_", 5);
    kiln_b64_encode(raw, sizeof raw, KILN_B64_URL | KILN_B64_NOPAD, token + 5);
    if (!EVP_Digest(token, strlen(token), hash, &hl, EVP_sha256(), NULL)) {
        fprintf(stderr, "kiln tokens: SHA-256 failed\n");
        goto out;
    }
    kiln_hex(hash, sizeof hash, hex);
    printf("token: %s\nline:  sha256:%s %s %s\n", token, hex, project, role);
    fprintf(stderr, "Add the line to kilnd's tokens file (mode 600) and send kilnd SIGHUP.\n"
                    "The token is shown this once; kilnd keeps only its hash.\n");
    rc = 0;
    goto out;
bad:
    fputs(usage, stderr);
out:
    OPENSSL_cleanse(raw, sizeof raw);
    OPENSSL_cleanse(token, sizeof token);
    return rc;
}

/* test_ps_keys.c - the CURVE keys kilnd writes for a job attempt
 * (src/exec/supervisor/pskeys.c) work with ZeroMQ end to end: the file is 0600 and
 * loads (kiln_ps_keys_load); a ps given them serves a worker given them and
 * refuses a worker with the keys of another attempt; a file others may read
 * is refused. */
#include "exec/supervisor/pskeys.h"
#include "kiln/ps.h"
#include "test.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void *serve(void *p)
{
    kiln_ps_server_run(p, &g_stop);
    return NULL;
}

static int pull(const char *addr, const kiln_ps_keys *k)
{
    size_t n = 4;
    kiln_ps_client_config cc = {.num_ps = 1,
                                .addrs = &addr,
                                .shard_size = &n,
                                .timeout_ms = 500,
                                .retry_ms = 250,
                                .curve_server = k->server_public,
                                .curve_public = k->client_public,
                                .curve_secret = k->client_secret};
    char err[256];
    float out[4] = {0}, *pp = out;
    kiln_ps_client *c = kiln_ps_client_new(&cc, err, sizeof(err));
    int rc = c ? kiln_ps_pull(c, &pp) : -1;
    if (rc == 0 && out[3] != 4.0f) rc = -1;
    kiln_ps_client_free(c);
    return rc;
}

int main(void)
{
    char dir[] = "/tmp/kiln-pskeys.XXXXXX", p1[PATH_MAX], p2[PATH_MAX], err[256];
    kiln_ps_keys a, b;
    struct stat st;
    CHECK(mkdtemp(dir) != NULL);
    CHECK(kilnd_ps_keys_write(dir, p1, sizeof p1) == 0);
    CHECK(stat(p1, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_MSG(kiln_ps_keys_load(p1, &a, err, sizeof err) == 0, "%s", err);
    /* the next attempt: new keys in the same place */
    CHECK(kilnd_ps_keys_write(dir, p2, sizeof p2) == 0 && strcmp(p1, p2) == 0);
    CHECK_MSG(kiln_ps_keys_load(p2, &b, err, sizeof err) == 0, "%s", err);
    CHECK(strcmp(a.server_secret, b.server_secret) != 0 &&
          strcmp(a.client_secret, b.client_secret) != 0);

    float p0[4] = {1, 2, 3, 4};
    kiln_ps_server_config sc = {.endpoint = "tcp://127.0.0.1:*",
                                .n = 4,
                                .params = p0,
                                .max_staleness = KILN_PS_UNBOUNDED,
                                .curve_secret = b.server_secret,
                                .curve_client = b.client_public};
    kiln_ps_server *s = kiln_ps_server_new(&sc, err, sizeof err);
    CHECK_MSG(s != NULL, "%s", err);
    if (s) {
        pthread_t th;
        pthread_create(&th, NULL, serve, s);
        const char *addr = kiln_ps_server_endpoint(s) + strlen("tcp://");
        CHECK_MSG(pull(addr, &b) == 0, "this attempt's worker is served");
        CHECK_MSG(pull(addr, &a) != 0, "the last attempt's worker is refused");
        g_stop = 1;
        pthread_join(th, NULL);
        kiln_ps_stats stt;
        kiln_ps_server_stats(s, &stt);
        CHECK(stt.rejected >= 1);
        kiln_ps_server_free(s);
    }
    chmod(p2, 0644);
    CHECK(kiln_ps_keys_load(p2, &b, err, sizeof err) != 0 && strstr(err, "others") != NULL);
    unlink(p2);
    rmdir(dir);
    TEST_DONE();
}

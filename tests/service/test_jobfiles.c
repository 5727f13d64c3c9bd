/* tests/service/test_jobfiles.c - src/jobfiles through its own handle, with
 * no kilnd: a job's directory, its service events, and the TTL markers
 * (made, kept, dropped once the store has no such job). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobfiles/jobfiles.h"
#include "kiln/store.h"
#include "test.h"

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

int main(void)
{
    char tmpl[] = "/tmp/kiln-jobfiles-XXXXXX", p[512], buf[4096];
    const char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir) TEST_DONE();
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_store *st = NULL;
    snprintf(p, sizeof p, "%s/kilnd.db", dir);
    CHECK(kiln_store_open(p, &st, &dg) == KILN_OK);
    volatile sig_atomic_t stop = 0;
    kiln_jobfiles *jf = kiln_jobfiles_new(dir, st, &stop);
    CHECK(jf != NULL);
    if (!jf || !st) TEST_DONE();

    kiln_jobfiles_dir(jf, "p1", "j1", buf, sizeof buf);
    snprintf(p, sizeof p, "%s/jobs/p1/j1", dir);
    CHECK(strcmp(buf, p) == 0);

    /* an event makes the directory and appends one service line */
    kiln_jobfiles_event(jf, "p1", "j1", "INFO", "Job %s (%d)", "QUEUED", 7);
    kiln_jobfiles_event(jf, "p1", "j1", "WARNING", "second");
    snprintf(p, sizeof p, "%s/jobs/p1/j1/log.tsv", dir);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL);
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        CHECK(strncmp(buf, "INFO\t", 5) == 0);
        CHECK(strstr(buf, "\tservice\tJob QUEUED (7)\n") != NULL);
        CHECK(strstr(buf, "\nWARNING\t") != NULL && strstr(buf, "\tservice\tsecond\n") != NULL);
    }

    /* the TTL marker: made once, there already the second time */
    snprintf(p, sizeof p, "%s/ttl/p1/gone", dir);
    CHECK(kiln_jobfiles_ttl_mark(jf, "p1", "gone") == 1);
    CHECK(exists(p));
    CHECK(kiln_jobfiles_ttl_mark(jf, "p1", "gone") == 0);
    kiln_jobfiles_ttl_unmark(jf, "p1", "gone");
    CHECK(!exists(p));

    /* a marked job the store does not have: the first tick drops its marker */
    CHECK(kiln_jobfiles_ttl_mark(jf, "p1", "gone") == 1);
    kiln_jobfiles_ttl_created(jf, "p1", "gone");
    CHECK(exists(p));
    kiln_jobfiles_ttl_tick(jf, kiln_now_ns());
    CHECK(!exists(p));

    /* a marker a previous kilnd left is read by a new handle's first tick */
    CHECK(kiln_jobfiles_ttl_mark(jf, "p2", "old") == 1);
    kiln_jobfiles_free(jf);
    snprintf(p, sizeof p, "%s/ttl/p2/old", dir);
    CHECK(exists(p));
    jf = kiln_jobfiles_new(dir, st, NULL);
    CHECK(jf != NULL);
    if (jf) kiln_jobfiles_ttl_tick(jf, kiln_now_ns());
    CHECK(!exists(p));
    kiln_jobfiles_free(jf);

    kiln_store_close(st);
    kiln_diag_free(&dg);
    snprintf(buf, sizeof buf, "rm -rf '%s'", dir);
    CHECK(system(buf) == 0);
    TEST_DONE();
}

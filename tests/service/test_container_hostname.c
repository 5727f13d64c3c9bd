/* tests/service/test_container_hostname.c - a container replica's hostname
 * (kiln_exec_container_hostname, src/exec/container/podman.c) is a DNS label
 * of at most 63 characters for the longest names each API allows, and every
 * replica of a job, every trial's included, gets its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/exec.h"
#include "test.h"

static bool is_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every replica task of `trials` trials (0: no trials) with `n` replicas per
 * role: each hostname a label, no two the same. */
static void all_replicas(const char *project, const char *job_id, int trials, int n)
{
    static const char *const roles[] = {"master", "worker", "ps", "evaluator"};
    size_t cap = (size_t)(trials ? trials : 1) * 4 * (size_t)n, k = 0;
    char **names = calloc(cap, sizeof *names);
    CHECK(names != NULL);
    if (!names) return;
    for (int t = trials ? 1 : 0; t <= trials; t++)
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < n; i++) {
                char task[64], cname[512], host[64];
                if (t)
                    snprintf(task, sizeof task, "trial-%d-%s-replica-%d", t, roles[r], i);
                else
                    snprintf(task, sizeof task, "%s-replica-%d", roles[r], i);
                kiln_exec_container_name(project, job_id, task, cname, sizeof cname);
                kiln_exec_container_hostname(cname, host);
                CHECK_MSG(is_label(host), "'%s' -> '%s' is a DNS label", cname, host);
                names[k++] = strdup(host);
            }
    qsort(names, k, sizeof *names, cmp);
    size_t dups = 0;
    for (size_t i = 1; i < k; i++)
        if (strcmp(names[i - 1], names[i]) == 0) dups++;
    CHECK_MSG(dups == 0, "%s/%s: %zu of %zu hostnames repeat", project, job_id, dups, k);
    for (size_t i = 0; i < k; i++)
        free(names[i]);
    free(names);
}

int main(void)
{
    char host[64], project[64], mljob[129];
    /* the trial: 69 characters, the kernel's limit is 64 */
    kiln_exec_container_hostname("kiln-default-hptuningjob_8729447704143589907-trial-1-master-"
                                 "replica-0",
                                 host);
    CHECK(is_label(host));
    CHECK_MSG(strncmp(host, "kiln-default-hptuningjob-8729447704143589907-", 45) == 0,
              "a readable prefix: %s", host);
    /* a name that is a label already stays itself */
    kiln_exec_container_hostname("kiln-p1-job1-worker-replica-3", host);
    CHECK(strcmp(host, "kiln-p1-job1-worker-replica-3") == 0);
    /* the same name, the same hostname (each replica's --add-host lists the
     * others by it); case and '_' do not merge two names */
    char a[64], b[64];
    kiln_exec_container_hostname("kiln-P1-job_1-master-replica-0", a);
    kiln_exec_container_hostname("kiln-P1-job_1-master-replica-0", b);
    CHECK(strcmp(a, b) == 0);
    kiln_exec_container_hostname("kiln-p1-job-1-master-replica-0", b);
    CHECK(is_label(a) && strcmp(a, b) != 0);
    kiln_exec_container_hostname("___", a);
    CHECK(is_label(a));
    kiln_exec_container_hostname("", a);
    CHECK(is_label(a));

    /* the longest ids each API allows: a 63-character project (kilnd's
     * project rule), ml v1's 128-character jobId (data/catalog/service.yaml
     * jobIdMaxLength), Vertex's largest int64 id, 1000 trials
     * (KILN_TUNE_MAX_TRIALS) */
    memset(project, 'p', 63);
    project[63] = '\0';
    memset(mljob, 'j', 128);
    mljob[0] = 'J';
    mljob[64] = '_';
    mljob[128] = '\0';
    all_replicas(project, mljob, 0, 100);
    all_replicas(project, "customjob_9223372036854775807", 0, 100);
    all_replicas(project, "hptuningjob_9223372036854775807", 1000, 3);
    all_replicas("default", "hptuningjob_8729447704143589907", 1000, 2);
    TEST_DONE();
}

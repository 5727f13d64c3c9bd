/* tests/service/test_slurm_accounts.c - the queues side of Slurm's
 * accounting (src/exec/slurm/accounts.h) on a queues file, with no Slurm:
 * this file stands in for kiln_slurm_run and answers scontrol's
 * show assoc_mgr as text.
 *   - a job's account and QOS: its ClusterQueue, its priority class;
 *   - why jobs wait: Slurm's reason in its ClusterQueue's words, the
 *     ClusterQueue and the project's LocalQueue of the account;
 *   - the usage: the accounts asked of, scontrol's lines read (the
 *     account's own only, Slurm's units in kiln's), stored in the queues
 *     (everything cleared first), nothing read when scontrol fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/slurm/accounts.h"
#include "test.h"

/* ---- the stand-in for Slurm's commands ---- */
static char last_cmd[1024];
static const char *answer = "";
static int answer_rc = 0;

int kiln_slurm_run(char *const argv[], char **out, int timeout_s)
{
    (void)timeout_s;
    size_t n = 0;
    last_cmd[0] = '\0';
    for (size_t i = 0; argv[i]; i++)
        n += (size_t)snprintf(last_cmd + n, sizeof last_cmd - n, "%s%s", i ? " " : "", argv[i]);
    *out = strdup(answer);
    return answer_rc;
}

/* CHECK_STR for a char array (never NULL) */
#define CHECK_BUF(a, b) CHECK_MSG(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))

#define HDR "apiVersion: kueue.x-k8s.io/v1beta1\n"
static const char QUEUES[] =
    HDR "kind: ResourceFlavor\nmetadata:\n  name: default\n---\n" HDR
        "kind: ClusterQueue\nmetadata:\n  name: cq-a\nspec:\n  namespaceSelector: {}\n"
        "  resourceGroups:\n  - coveredResources: [\"cpu\", \"memory\", \"nvidia.com/gpu\"]\n"
        "    flavors:\n    - name: default\n      resources:\n"
        "      - name: cpu\n        nominalQuota: 8\n"
        "      - name: memory\n        nominalQuota: 16Gi\n"
        "      - name: nvidia.com/gpu\n        nominalQuota: 2\n---\n" HDR
        "kind: ClusterQueue\nmetadata:\n  name: cq-b\nspec:\n  namespaceSelector: {}\n"
        "  stopPolicy: Hold\n"
        "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\"]\n"
        "    flavors:\n    - name: default\n      resources:\n"
        "      - name: nvidia.com/gpu\n        nominalQuota: 4\n---\n" HDR
        "kind: LocalQueue\nmetadata:\n  namespace: p1\n  name: default\nspec:\n"
        "  clusterQueue: cq-a\n---\n" HDR
        "kind: LocalQueue\nmetadata:\n  namespace: p2\n  name: lq-b\nspec:\n"
        "  clusterQueue: cq-b\n---\n" HDR
        "kind: WorkloadPriorityClass\nmetadata:\n  name: high\nvalue: 1000\n";

static long cq_of(const kiln_queues *q, const char *name)
{
    for (size_t i = 0; i < q->ncqs; i++)
        if (strcmp(q->cqs[i].name, name) == 0) return (long)i;
    return -1;
}

static int64_t usage(const kiln_queues *q, long cq, kiln_qres r)
{
    return q->cqs[cq].groups[0].flavors[0].usage[r];
}

static void test_job_account(const kiln_queues *q)
{
    char acct[64], qos[64];
    kiln_map labels = {0};
    CHECK(kiln_slurm_job_account(q, "p1", &labels, acct, sizeof acct, qos, sizeof qos));
    CHECK_BUF(acct, "cq-a");
    CHECK_BUF(qos, "");
    CHECK(kiln_map_set(&labels, KILN_QUEUE_LABEL, "lq-b") == KILN_OK);
    CHECK(kiln_map_set(&labels, KILN_PRIORITY_CLASS_LABEL, "high") == KILN_OK);
    CHECK(kiln_slurm_job_account(q, "p2", &labels, acct, sizeof acct, qos, sizeof qos));
    CHECK_BUF(acct, "cq-b");
    CHECK_BUF(qos, "high");
    /* no LocalQueue of p3's, and no queues at all: routes nowhere */
    CHECK(!kiln_slurm_job_account(q, "p3", NULL, acct, sizeof acct, qos, sizeof qos));
    CHECK(acct[0] == '\0' && qos[0] == '\0');
    CHECK(!kiln_slurm_job_account(NULL, "p1", NULL, acct, sizeof acct, qos, sizeof qos));
    kiln_map_clear(&labels);
}

static void test_waits(const kiln_queues *q)
{
    const kiln_slurm_wait w[] = {
        {"p1", "j1", "cq-a", NULL, "AssocGrpGRES"},
        {"p2", "j2", "cq-b", "high", "AssocGrpJobsLimit"},
        {"p1", "j3", "cq-b", NULL, "Priority"}, /* p1 has no LocalQueue of cq-b */
        {"p3", "j4", NULL, NULL, NULL},         /* no account: no ClusterQueue */
    };
    size_t k = 99;
    kiln_slurm_waiting *v = kiln_slurm_waits(q, w, 4, &k);
    CHECK(v && k == 4);
    if (!v || k != 4) return;
    CHECK_STR(v[0].project, "p1");
    CHECK_STR(v[0].job_id, "j1");
    CHECK_STR(v[0].cluster_queue, "cq-a");
    CHECK_STR(v[0].local_queue, "default");
    CHECK(strstr(v[0].why, "ClusterQueue cq-a's quota is in use") != NULL);
    CHECK_STR(v[1].cluster_queue, "cq-b");
    CHECK_STR(v[1].local_queue, "lq-b");
    CHECK(strstr(v[1].why, "ClusterQueue cq-b is held") != NULL);
    CHECK_STR(v[2].cluster_queue, "cq-b");
    CHECK(v[2].local_queue == NULL);
    CHECK(v[3].cluster_queue == NULL && v[3].local_queue == NULL);
    CHECK_STR(v[3].why, "Slurm holds it PENDING (None)");
    kiln_slurm_waiting_free(v, k);
    /* none waits: an empty record, not a failure */
    v = kiln_slurm_waits(q, NULL, 0, &k);
    CHECK(v && k == 0);
    kiln_slurm_waiting_free(v, k);
}

static void test_usage(kiln_queues *q)
{
    char accts[256];
    CHECK(kiln_slurm_usage_accounts(q, accts, sizeof accts));
    CHECK_BUF(accts, "accounts=cq-a,cq-b");
    char none[64];
    CHECK(!kiln_slurm_usage_accounts(NULL, none, sizeof none));

    long a = cq_of(q, "cq-a"), b = cq_of(q, "cq-b");
    CHECK(a >= 0 && b >= 0);
    if (a < 0 || b < 0) return;
    /* what an earlier pass left: cleared by the next store */
    q->cqs[b].admitted = 7;
    q->cqs[b].pending = 7;
    q->cqs[b].groups[0].flavors[0].usage[KILN_QRES_GPU] = 3;

    answer = "ClusterName=kiln Account=cq-a UserName= Partition= GrpJobs=N(2) "
             "GrpSubmitJobs=N(5) GrpTRES=cpu=8(3),mem=16384(2048),energy=N(0),gres/gpu=2(1)\n"
             "ClusterName=kiln Account=cq-a UserName=alice(1000) Partition= GrpJobs=N(9) "
             "GrpSubmitJobs=N(9) GrpTRES=cpu=N(9)\n"
             "ClusterName=kiln Account=other UserName= Partition= GrpJobs=N(4)\n"
             "garbage\n";
    answer_rc = 0;
    kiln_slurm_usage u;
    CHECK(kiln_slurm_usage_read(accts, &u));
    CHECK_BUF(last_cmd, "scontrol -o show assoc_mgr flags=assoc accounts=cq-a,cq-b");
    CHECK(u.n == 2); /* the accounts' own lines, not the user's, not garbage */
    if (u.n == 2) {
        CHECK_STR(u.v[0].account, "cq-a");
        CHECK(u.v[0].jobs == 2 && u.v[0].submitted == 5);
        CHECK(u.v[0].used[KILN_QRES_CPU] == 3000);            /* millicores */
        CHECK(u.v[0].used[KILN_QRES_MEMORY] == 2048LL << 20); /* bytes */
        CHECK(u.v[0].used[KILN_QRES_GPU] == 1);
        CHECK(u.v[0].used[KILN_QRES_PODS] == -1);
        CHECK_STR(u.v[1].account, "other");
        CHECK(u.v[1].jobs == 4 && u.v[1].submitted == -1);
    }
    kiln_slurm_usage_store(q, &u);
    kiln_slurm_usage_free(&u);
    CHECK(u.v == NULL && u.n == 0);
    CHECK(q->cqs[a].admitted == 2 && q->cqs[a].pending == 3);
    CHECK(usage(q, a, KILN_QRES_CPU) == 3000);
    CHECK(usage(q, a, KILN_QRES_MEMORY) == 2048LL << 20);
    CHECK(usage(q, a, KILN_QRES_GPU) == 1);
    /* cq-b had no line: nothing of the earlier pass is left */
    CHECK(q->cqs[b].admitted == 0 && q->cqs[b].pending == 0);
    CHECK(usage(q, b, KILN_QRES_GPU) == 0);

    /* scontrol fails: nothing read, so the caller changes nothing */
    answer = "scontrol: error: Unable to contact slurm controller";
    answer_rc = 1;
    u.n = 42;
    CHECK(!kiln_slurm_usage_read(accts, &u));
    CHECK(u.v == NULL && u.n == 0);
    CHECK(q->cqs[a].admitted == 2);
}

int main(void)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_queues *q = NULL;
    CHECK(kiln_queues_load(QUEUES, sizeof QUEUES - 1, &q, &dg) == KILN_OK);
    if (!q) {
        kiln_diag_print(&dg, stderr);
        kiln_diag_free(&dg);
        TEST_DONE();
    }
    kiln_diag_free(&dg);
    test_job_account(q);
    test_waits(q);
    test_usage(q);
    kiln_queues_free(q);
    TEST_DONE();
}

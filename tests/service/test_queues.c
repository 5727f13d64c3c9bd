/* tests/service/test_queues.c - Kueue's YAML (src/queues): the example file
 * loads; fields kiln does not act on are refused at their paths; routing by
 * label and by a project's default queue; quota with borrowing within
 * borrowingLimit and lendingLimit; weighted share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/queues.h"
#include "test.h"

static kiln_queues *load(const char *text, kiln_diag *d)
{
    kiln_queues *q = NULL;
    kiln_diag_clear(d);
    if (kiln_queues_load(text, strlen(text), &q, d) != KILN_OK) return NULL;
    return q;
}

/* Whether some violation's field contains `part` (paths are "KIND NAME: field"). */
static bool has_field(const kiln_diag *d, const char *part)
{
    for (size_t i = 0; i < d->n; i++)
        if (strstr(d->v[i].field, part)) return true;
    return false;
}

#define HDR    "apiVersion: kueue.x-k8s.io/v1beta1\n"
#define FLAVOR HDR "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n"

/* A ClusterQueue with one GPU group of flavor v100; extra lines go under resources[0]. */
static char *cq(char *buf, size_t len, const char *name, const char *cohort, const char *nominal,
                const char *extra, const char *spec_extra)
{
    snprintf(buf, len,
             HDR
             "kind: ClusterQueue\nmetadata:\n  name: %s\nspec:\n  namespaceSelector: {}\n%s%s%s%s"
             "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\"]\n    flavors:\n"
             "    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n"
             "        nominalQuota: %s\n%s---\n",
             name, cohort ? "  cohort: " : "", cohort ? cohort : "", cohort ? "\n" : "",
             spec_extra ? spec_extra : "", nominal, extra ? extra : "");
    return buf;
}

static const int64_t GPUS1[KILN_QRES_COUNT] = {1, 0, 0};
static const int64_t GPUS2[KILN_QRES_COUNT] = {2, 0, 0};

int main(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    char why[512], a[2048], b[2048], all[8192];
    kiln_queues *q = NULL;

    /* the example loads, every object read */
    CHECK(kiln_queues_load_file(KILN_SOURCE_DIR "/examples/queues/two-teams.yaml", &q, &d) ==
          KILN_OK);
    kiln_diag_print(&d, stderr);
    if (q) {
        CHECK(q->nflavors == 1 && q->ncqs == 2 && q->nlqs == 2 && q->npcs == 1);
        CHECK_STR(q->flavors[0].node_labels.vals[0], "nvidia-tesla-v100");
        CHECK_STR(q->cqs[0].cohort, "lab");
        CHECK(q->cqs[0].groups[0].flavors[0].q[KILN_QRES_GPU].nominal == 2);
        CHECK(q->pcs[0].value == 1000);
        /* routing: the label, the project's "default", neither */
        kiln_map l = {0};
        CHECK(kiln_queues_route(q, "team-a", &l, why, sizeof why) == 0);
        CHECK(kiln_queues_route(q, "team-b", &l, why, sizeof why) == -1);
        CHECK(strstr(why, "no LocalQueue named 'default'") != NULL);
        kiln_map_set(&l, KILN_QUEUE_LABEL, "training");
        CHECK(kiln_queues_route(q, "team-b", &l, why, sizeof why) == 1);
        CHECK(kiln_queues_route(q, "team-a", &l, why, sizeof why) == -1);
        CHECK(strstr(why, "another project") != NULL);
        int64_t p = 0;
        kiln_map_set(&l, KILN_PRIORITY_CLASS_LABEL, "urgent");
        CHECK(kiln_queues_priority(q, &l, 5, &p, why, sizeof why) && p == 1000);
        kiln_map_set(&l, KILN_PRIORITY_CLASS_LABEL, "nope");
        CHECK(!kiln_queues_priority(q, &l, 5, &p, why, sizeof why));
        /* under --executor slurm the file is Slurm's accounts: what Slurm
         * makes meaningless is refused (cohort, nodeLabels), the rest is
         * acted on (quota -> GrpTRES, LocalQueue -> association, priority
         * class -> QOS) */
        kiln_diag sd = KILN_DIAG_INIT;
        CHECK(kiln_queues_slurm_refusals(q, true, &sd) == sd.n && sd.n == 3);
        CHECK(has_field(&sd, "ClusterQueue team-a: spec.cohort"));
        CHECK(has_field(&sd, "ClusterQueue team-b: spec.cohort"));
        CHECK(has_field(&sd, "ResourceFlavor v100: spec.nodeLabels"));
        CHECK(!has_field(&sd, "LocalQueue"));
        CHECK(!has_field(&sd, "nominalQuota"));
        CHECK(!has_field(&sd, "WorkloadPriorityClass"));
        char tres[200];
        kiln_queues_slurm_tres(q, 1, tres, sizeof tres);
        CHECK_MSG(strcmp(tres, "gres/gpu=2,cpu=-1,mem=-1") == 0, "%s", tres);
        CHECK(kiln_queues_slurm_fairshare(q, 0) == 1);
        /* --executor slurm: kiln admits (cohorts, preemption and all),
         * only the flavor's nodeLabels are refused */
        kiln_diag st = KILN_DIAG_INIT;
        CHECK(kiln_queues_steps_refusals(q, &st) == 1 && st.n == 1);
        CHECK(has_field(&st, "ResourceFlavor v100: spec.nodeLabels"));
        CHECK(!has_field(&st, "cohort"));
        kiln_diag_free(&st);
        kiln_diag_free(&sd);
        kiln_map_clear(&l);

        /* quota: A takes its 2, borrows B's 2, and no more; B then has none */
        kiln_qassign as;
        CHECK(kiln_queues_fit(q, 0, GPUS2, NULL, &as, why, sizeof why) && !as.borrows &&
              as.flavor[0] == 0);
        kiln_queues_charge(q, 0, &as, GPUS2, 1);
        kiln_qassign as2;
        CHECK(kiln_queues_fit(q, 0, GPUS2, NULL, &as2, why, sizeof why) && as2.borrows);
        kiln_queues_charge(q, 0, &as2, GPUS2, 1);
        CHECK(!kiln_queues_fit(q, 0, GPUS1, NULL, &as, why, sizeof why));
        CHECK_MSG(strstr(why, "cohort lab has 0 left") != NULL, "%s", why);
        CHECK(!kiln_queues_fit(q, 1, GPUS1, NULL, &as, why, sizeof why));
        int64_t bor[KILN_QRES_COUNT];
        kiln_queues_borrowed(q, 0, bor);
        CHECK(bor[KILN_QRES_GPU] == 2);
        CHECK(kiln_queues_share(q, 0, NULL) == 500); /* 2 borrowed of 4 lendable */
        CHECK(kiln_queues_share(q, 1, NULL) == 0);
        kiln_queues_charge(q, 0, &as2, GPUS2, -1);
        CHECK(kiln_queues_fit(q, 1, GPUS2, NULL, &as, why, sizeof why) && !as.borrows);
        /* a flavor no node can run is passed over, and said */
        bool usable[1] = {false};
        CHECK(!kiln_queues_fit(q, 1, GPUS1, usable, &as, why, sizeof why));
        CHECK(strstr(why, "no node") != NULL);
        kiln_queues_free(q);
        q = NULL;
    }

    /* Kueue's single-ClusterQueue sample, in its shape: 9 CPUs and 36Gi */
    CHECK(kiln_queues_load_file(KILN_SOURCE_DIR "/examples/queues/single-clusterqueue.yaml", &q,
                                &d) == KILN_OK);
    kiln_diag_print(&d, stderr);
    if (q) {
        /* under Slurm with --slurm-machine-resources yes: nothing refused; 9
         * CPUs and 36Gi (36864 MiB) of GrpTRES. Without it Slurm would count 1
         * CPU a replica: both quotas refused */
        kiln_diag sd = KILN_DIAG_INIT;
        CHECK(kiln_queues_slurm_refusals(q, false, &sd) == 2 &&
              has_field(
                  &sd, "ClusterQueue cluster-queue: spec.resourceGroups[0].coveredResources cpu") &&
              has_field(&sd, "coveredResources memory"));
        kiln_diag_clear(&sd);
        CHECK(kiln_queues_slurm_refusals(q, true, &sd) == 0);
        CHECK(kiln_queues_steps_refusals(q, &sd) == 0); /* no nodeLabels: nothing refused */
        kiln_diag_print(&sd, stderr);
        kiln_diag_free(&sd);
        char tres[200];
        kiln_queues_slurm_tres(q, 0, tres, sizeof tres);
        CHECK_MSG(strcmp(tres, "gres/gpu=-1,cpu=9,mem=36864") == 0, "%s", tres);
        kiln_map l = {0};
        kiln_map_set(&l, KILN_QUEUE_LABEL, "user-queue");
        CHECK(kiln_queues_route(q, "default", &l, why, sizeof why) == 0);
        kiln_map_clear(&l);
        kiln_qassign as;
        const int64_t fits[KILN_QRES_COUNT] = {0, 9000, 36LL << 30};
        const int64_t cpu_over[KILN_QRES_COUNT] = {0, 9001, 1};
        CHECK(kiln_queues_fit(q, 0, fits, NULL, &as, why, sizeof why) && as.flavor[0] == 0);
        CHECK(!kiln_queues_fit(q, 0, cpu_over, NULL, &as, why, sizeof why));
        CHECK_MSG(strstr(why, "cpu of flavor default-flavor: asks 9001m, 0 of nominalQuota 9") !=
                      NULL,
                  "%s", why);
        /* a GPU job: the queue does not cover nvidia.com/gpu */
        const int64_t gpu[KILN_QRES_COUNT] = {1, 1000, 1};
        CHECK(!kiln_queues_fit(q, 0, gpu, NULL, &as, why, sizeof why));
        kiln_queues_free(q);
        q = NULL;
    }

    /* a flavor whose nodeLabels name a node: under --executor slurm it
     * pins the admitted job there (kept), another label is refused by its
     * key; under batch every label is refused */
    snprintf(all, sizeof all, "%s%s",
             HDR "kind: ResourceFlavor\nmetadata:\n  name: v100\nspec:\n  nodeLabels:\n"
                 "    kubernetes.io/hostname: n1\n    kiln.dev/node: n1\n    disk: ssd\n---\n",
             cq(a, sizeof a, "a", NULL, "2", NULL, NULL));
    q = load(all, &d);
    kiln_diag_print(&d, stderr);
    CHECK(q != NULL);
    if (q) {
        kiln_diag sd = KILN_DIAG_INIT;
        CHECK(kiln_queues_steps_refusals(q, &sd) == 1);
        CHECK(has_field(&sd, "ResourceFlavor v100: spec.nodeLabels.disk"));
        CHECK(!has_field(&sd, "hostname") && !has_field(&sd, "kiln.dev/node"));
        kiln_diag_clear(&sd);
        CHECK(kiln_queues_slurm_refusals(q, true, &sd) == 3);
        CHECK(has_field(&sd, "spec.nodeLabels.kubernetes.io/hostname"));
        kiln_diag_free(&sd);
        kiln_queues_free(q);
        q = NULL;
    }

    /* borrowingLimit and lendingLimit */
    snprintf(all, sizeof all, "%s%s%s", FLAVOR,
             cq(a, sizeof a, "a", "lab", "2", "        borrowingLimit: 1\n", NULL),
             cq(b, sizeof b, "b", "lab", "4", "        lendingLimit: 3\n", NULL));
    q = load(all, &d);
    kiln_diag_print(&d, stderr);
    CHECK(q != NULL);
    if (q) {
        kiln_qassign as;
        const int64_t three[KILN_QRES_COUNT] = {3, 0, 0}, four[KILN_QRES_COUNT] = {4, 0, 0};
        CHECK(kiln_queues_fit(q, 0, three, NULL, &as, why, sizeof why) && as.borrows);
        CHECK(!kiln_queues_fit(q, 0, four, NULL, &as, why, sizeof why)); /* 2 + borrowingLimit 1 */
        CHECK(strstr(why, "borrowingLimit") != NULL);
        /* b keeps 1 of its 4 to itself: with a using 3 (borrowing 1), b has 3 */
        kiln_queues_fit(q, 0, three, NULL, &as, why, sizeof why);
        kiln_queues_charge(q, 0, &as, three, 1);
        CHECK(kiln_queues_fit(q, 1, three, NULL, &as, why, sizeof why));
        CHECK(!kiln_queues_fit(q, 1, four, NULL, &as, why, sizeof why));
        kiln_queues_free(q);
    }
    /* b lends 1 only: a (nominal 2, no borrowingLimit) holds at most 3 */
    snprintf(all, sizeof all, "%s%s%s", FLAVOR, cq(a, sizeof a, "a", "lab", "2", NULL, NULL),
             cq(b, sizeof b, "b", "lab", "4", "        lendingLimit: 1\n", NULL));
    q = load(all, &d);
    CHECK(q != NULL);
    if (q) {
        kiln_qassign as;
        const int64_t three[KILN_QRES_COUNT] = {3, 0, 0}, four[KILN_QRES_COUNT] = {4, 0, 0};
        CHECK(kiln_queues_fit(q, 0, three, NULL, &as, why, sizeof why));
        CHECK(!kiln_queues_fit(q, 0, four, NULL, &as, why, sizeof why));
        kiln_queues_free(q);
    }

    /* refusals, each at its path */
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", NULL, "2", NULL, "  admissionChecks: [x]\n"));
    CHECK(load(all, &d) == NULL && has_field(&d, "ClusterQueue a: spec.admissionChecks"));
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", NULL, "2", "        borrowingLimit: 1\n", NULL));
    CHECK(load(all, &d) == NULL && has_field(&d, "resources[0].borrowingLimit"));
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", "lab", "2", "        lendingLimit: 3\n", NULL));
    CHECK(load(all, &d) == NULL && has_field(&d, "resources[0].lendingLimit"));
    snprintf(all, sizeof all, "%s", cq(a, sizeof a, "a", NULL, "2", NULL, NULL));
    CHECK(load(all, &d) == NULL && has_field(&d, "flavors[0].name"));
    CHECK(strstr(d.v[0].description, "no ResourceFlavor named 'v100'") != NULL);
    snprintf(all, sizeof all, "%s%s", FLAVOR, cq(a, sizeof a, "a", NULL, "1.5", NULL, NULL));
    CHECK(load(all, &d) == NULL && has_field(&d, "nominalQuota"));
    snprintf(
        all, sizeof all, "%s%s", FLAVOR,
        cq(a, sizeof a, "a", "lab", "2", NULL, "  preemption:\n    reclaimWithinCohort: Some\n"));
    CHECK(load(all, &d) == NULL && has_field(&d, "spec.preemption.reclaimWithinCohort"));
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", "lab", "2", NULL,
                "  preemption:\n    reclaimWithinCohort: Any\n    withinClusterQueue: "
                "LowerOrNewerEqualPriority\n"));
    q = load(all, &d);
    CHECK(q && q->cqs[0].reclaim == KILN_QP_ANY &&
          q->cqs[0].within_cq == KILN_QP_LOWER_OR_NEWER_EQUAL_PRIORITY);
    kiln_queues_free(q);
    /* borrowWithinCohort: acted on with a cohort and reclaimWithinCohort
     * (Kueue's rule); a threshold with policy Never means nothing: refused */
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", "lab", "2", NULL,
                "  preemption:\n    reclaimWithinCohort: Any\n    borrowWithinCohort:\n"
                "      policy: LowerPriority\n      maxPriorityThreshold: 100\n"));
    q = load(all, &d);
    kiln_diag_print(&d, stderr);
    CHECK(q && q->cqs[0].borrow_within == KILN_QP_LOWER_PRIORITY &&
          q->cqs[0].has_max_priority_threshold && q->cqs[0].max_priority_threshold == 100);
    kiln_queues_free(q);
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", "lab", "2", NULL,
                "  preemption:\n    borrowWithinCohort:\n      policy: LowerPriority\n"));
    CHECK(load(all, &d) == NULL && has_field(&d, "borrowWithinCohort.policy") &&
          strstr(d.v[0].description, "reclaimWithinCohort") != NULL);
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", NULL, "2", NULL,
                "  preemption:\n    reclaimWithinCohort: Any\n    borrowWithinCohort:\n"
                "      policy: LowerPriority\n"));
    CHECK(load(all, &d) == NULL && has_field(&d, "borrowWithinCohort.policy") &&
          strstr(d.v[0].description, "spec.cohort") != NULL);
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", "lab", "2", NULL,
                "  preemption:\n    reclaimWithinCohort: Any\n    borrowWithinCohort:\n"
                "      policy: Never\n      maxPriorityThreshold: 5\n"));
    CHECK(load(all, &d) == NULL && has_field(&d, "borrowWithinCohort.maxPriorityThreshold"));
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", "lab", "2", NULL,
                "  preemption:\n    reclaimWithinCohort: Any\n    borrowWithinCohort:\n"
                "      policy: Any\n"));
    CHECK(load(all, &d) == NULL && has_field(&d, "borrowWithinCohort.policy"));
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", NULL, "2", NULL, "  queueingStrategy: Fastest\n"));
    CHECK(load(all, &d) == NULL && has_field(&d, "spec.queueingStrategy"));
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", NULL, "2", NULL, "  stopPolicy: HoldAndDrain\n"));
    q = load(all, &d);
    CHECK(q && q->cqs[0].stop == KILN_QSTOP_HOLD_AND_DRAIN &&
          strcmp(kiln_queues_stop_name(q->cqs[0].stop), "HoldAndDrain") == 0);
    kiln_queues_free(q);
    snprintf(all, sizeof all,
             "%s%s" HDR "kind: LocalQueue\nmetadata:\n  namespace: p\n  name: default\nspec:\n"
             "  clusterQueue: a\n  stopPolicy: HoldAndDrain\n",
             FLAVOR, cq(a, sizeof a, "a", NULL, "2", NULL, NULL));
    q = load(all, &d);
    CHECK(q && q->nlqs == 1 && q->lqs[0].stop == KILN_QSTOP_HOLD_AND_DRAIN);
    kiln_queues_free(q);
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", NULL, "2", NULL, "  stopPolicy: Drain\n"));
    CHECK(load(all, &d) == NULL && has_field(&d, "spec.stopPolicy"));
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "a", NULL, "2", NULL,
                "  stopPolicy: Hold\n  fairSharing:\n    weight: 2\n"));
    q = load(all, &d);
    CHECK(q && q->cqs[0].stop == KILN_QSTOP_HOLD && q->cqs[0].fair_sharing &&
          q->cqs[0].weight == 2);
    kiln_queues_free(q);
    CHECK(load(HDR "kind: ResourceFlavor\nmetadata:\n  name: spot\nspec:\n  nodeTaints: []\n",
               &d) == NULL &&
          has_field(&d, "ResourceFlavor spot: spec.nodeTaints"));
    CHECK(load("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: x\n",
               &d) == NULL &&
          has_field(&d, "apiVersion"));
    CHECK(load(HDR "kind: Workload\nmetadata:\n  name: x\n", &d) == NULL && has_field(&d, "kind"));
    CHECK(load(HDR "kind: LocalQueue\nmetadata:\n  name: x\nspec:\n  clusterQueue: c\n", &d) ==
              NULL &&
          has_field(&d, "metadata.namespace"));
    CHECK(load(HDR
               "kind: LocalQueue\nmetadata:\n  name: x\n  namespace: p\nspec:\n  clusterQueue: c\n",
               &d) == NULL &&
          has_field(&d, "LocalQueue p/x: spec.clusterQueue"));
    CHECK(load(HDR "kind: WorkloadPriorityClass\nmetadata:\n  name: x\nvalue: high\n", &d) ==
              NULL &&
          has_field(&d, "value"));
    CHECK(load(FLAVOR FLAVOR, &d) == NULL && has_field(&d, "metadata.name"));
    CHECK(load(HDR "kind: Cohort\nmetadata:\n  name: lab\nspec:\n  parent: root\n", &d) == NULL &&
          has_field(&d, "Cohort lab: spec.parent"));
    CHECK(load(HDR "kind: ResourceFlavor\nmetadata:\n  name: x\n  labels:\n    a: b\n", &d) ==
              NULL &&
          has_field(&d, "metadata.labels"));
    /* a resource kiln's jobs never ask for */
    snprintf(all, sizeof all, "%s%s", FLAVOR, cq(a, sizeof a, "a", NULL, "2", NULL, NULL));
    char *at = strstr(all, "\"nvidia.com/gpu\"]");
    if (at) memcpy(at, "\"amd.com/gpu.xx\"", 16);
    CHECK(load(all, &d) == NULL && has_field(&d, "coveredResources[0]"));
    /* garbage is refused, not crashed on */
    CHECK(load("{{{{", &d) == NULL && d.n > 0);
    CHECK(load("- a\n- b\n", &d) == NULL);
    q = load("", &d); /* an empty file: no queues (every job is then refused at submit) */
    CHECK(q != NULL && q->ncqs == 0);
    kiln_queues_free(q);

    /* quantities: cpu in millicores, memory in bytes */
    snprintf(all, sizeof all,
             FLAVOR HDR
             "kind: ClusterQueue\nmetadata:\n  name: c\nspec:\n  namespaceSelector:\n"
             "    matchLabels:\n      kubernetes.io/metadata.name: p1\n"
             "  resourceGroups:\n  - coveredResources: [cpu, memory]\n    flavors:\n"
             "    - name: v100\n      resources:\n      - name: cpu\n        nominalQuota: 1500m\n"
             "      - name: memory\n        nominalQuota: 16Gi\n---\n" HDR
             "kind: LocalQueue\nmetadata:\n  name: default\n  namespace: p2\nspec:\n  "
             "clusterQueue: c\n");
    q = load(all, &d);
    kiln_diag_print(&d, stderr);
    CHECK(q != NULL);
    if (q) {
        CHECK(q->cqs[0].groups[0].flavors[0].q[KILN_QRES_CPU].nominal == 1500);
        CHECK(q->cqs[0].groups[0].flavors[0].q[KILN_QRES_MEMORY].nominal == 16LL << 30);
        kiln_map l = {0};
        CHECK(kiln_queues_route(q, "p2", &l, why, sizeof why) == -1 &&
              strstr(why, "namespaceSelector"));
        kiln_qassign as;
        const int64_t gpu[KILN_QRES_COUNT] = {1, 1000, 0};
        CHECK(!kiln_queues_fit(q, 0, gpu, NULL, &as, why, sizeof why) &&
              strstr(why, "nvidia.com/gpu"));
        kiln_queues_free(q);
    }
    /* under --executor slurm: what Slurm cannot hold is refused, each at its path */
    {
        kiln_diag sd = KILN_DIAG_INIT;
        snprintf(all, sizeof all, "%s%s", FLAVOR,
                 cq(a, sizeof a, "s", NULL, "3", NULL, "  fairSharing:\n    weight: 3\n"));
        q = load(all, &d);
        CHECK(q != NULL);
        if (q) {
            CHECK(kiln_queues_slurm_refusals(q, true, &sd) == 0);
            CHECK(kiln_queues_slurm_fairshare(q, 0) == 3);
            kiln_queues_free(q);
        }
        snprintf(all, sizeof all, "%s%s", FLAVOR,
                 cq(a, sizeof a, "s", NULL, "3", NULL, "  fairSharing:\n    weight: 0.5\n"));
        q = load(all, &d);
        kiln_diag_clear(&sd);
        CHECK(q && kiln_queues_slurm_refusals(q, true, &sd) == 1 &&
              has_field(&sd, "ClusterQueue s: spec.fairSharing.weight"));
        kiln_queues_free(q);
        snprintf(all, sizeof all, "%s%s", FLAVOR,
                 cq(a, sizeof a, "s", NULL, "3", NULL,
                    "  preemption:\n    withinClusterQueue: LowerPriority\n"
                    "  queueingStrategy: StrictFIFO\n  stopPolicy: Hold\n"));
        q = load(all, &d);
        kiln_diag_clear(&sd);
        /* a ClusterQueue's Hold is acted on (its account's GrpJobs=0) */
        CHECK(q && kiln_queues_slurm_refusals(q, true, &sd) == 2 &&
              has_field(&sd, "ClusterQueue s: spec.preemption") &&
              has_field(&sd, "spec.queueingStrategy: StrictFIFO") &&
              !has_field(&sd, "spec.stopPolicy: Hold"));
        kiln_queues_free(q);
        /* HoldAndDrain: Slurm's GrpJobs=0 stops nothing running: refused */
        snprintf(all, sizeof all, "%s%s", FLAVOR,
                 cq(a, sizeof a, "s", NULL, "3", NULL, "  stopPolicy: HoldAndDrain\n"));
        q = load(all, &d);
        kiln_diag_clear(&sd);
        CHECK(q && kiln_queues_slurm_refusals(q, true, &sd) == 1 &&
              has_field(&sd, "ClusterQueue s: spec.stopPolicy: HoldAndDrain"));
        kiln_queues_free(q);
        /* fractions of a CPU or a MiB; two flavors in a group */
        snprintf(all, sizeof all,
                 FLAVOR HDR "kind: ResourceFlavor\nmetadata:\n  name: other\n---\n" HDR
                            "kind: ClusterQueue\nmetadata:\n  name: s\nspec:\n"
                            "  resourceGroups:\n  - coveredResources: [cpu, memory]\n"
                            "    flavors:\n    - name: v100\n      resources:\n"
                            "      - name: cpu\n        nominalQuota: 1500m\n"
                            "      - name: memory\n        nominalQuota: 1000k\n"
                            "    - name: other\n      resources:\n"
                            "      - name: cpu\n        nominalQuota: 2\n"
                            "      - name: memory\n        nominalQuota: 1Gi\n");
        q = load(all, &d);
        kiln_diag_print(&d, stderr);
        kiln_diag_clear(&sd);
        CHECK(q && kiln_queues_slurm_refusals(q, true, &sd) == 3 &&
              has_field(&sd, "flavors[0] cpu nominalQuota") &&
              has_field(&sd, "flavors[0] memory nominalQuota") &&
              has_field(&sd, "ClusterQueue s: spec.resourceGroups[0].flavors[1]"));
        kiln_queues_free(q);
        /* a negative priority (no Slurm QOS Priority), a held LocalQueue, a Cohort */
        snprintf(all, sizeof all,
                 "%s%s" HDR "kind: LocalQueue\nmetadata:\n  namespace: p\n  name: default\nspec:\n"
                 "  clusterQueue: s\n  stopPolicy: Hold\n---\n" HDR
                 "kind: WorkloadPriorityClass\nmetadata:\n  name: low\nvalue: -5\n---\n" HDR
                 "kind: Cohort\nmetadata:\n  name: lab\n",
                 FLAVOR, cq(a, sizeof a, "s", NULL, "3", NULL, NULL));
        q = load(all, &d);
        kiln_diag_print(&d, stderr);
        kiln_diag_clear(&sd);
        CHECK(q && kiln_queues_slurm_refusals(q, true, &sd) == 3 &&
              has_field(&sd, "LocalQueue p/default: spec.stopPolicy: Hold") &&
              has_field(&sd, "WorkloadPriorityClass low: value") && has_field(&sd, "Cohort lab"));
        kiln_diag_print(&sd, stderr);
        kiln_queues_free(q);
        q = NULL;
        kiln_diag_free(&sd);
    }

    kiln_diag_free(&d);
    TEST_DONE();
}

/* tests/service/test_queues.c - Kueue's YAML (src/queues): the example file
 * loads; fields kiln does not act on are refused at their paths; routing by
 * label and by a project's default queue; quota with borrowing within
 * borrowingLimit and lendingLimit; weighted share. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    /* borrowWithinCohort without a cohort: Kueue accepts it (it never comes into play) */
    q = load(all, &d);
    CHECK(q && q->cqs[0].borrow_within == KILN_QP_LOWER_PRIORITY && !q->cqs[0].cohort);
    kiln_queues_free(q);
    q = NULL;
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
#define RF HDR "kind: ResourceFlavor\nmetadata:\n  name: spot\nspec:\n"
    /* nodeTaints and tolerations are read (admission and placement honour
     * them: docs/queues.md), each checked as Kubernetes checks a node's
     * taint and a pod's toleration */
    q = load(RF "  nodeTaints: []\n", &d);
    CHECK(q && q->nflavors == 1 && q->flavors[0].n_node_taints == 0);
    kiln_queues_free(q);
    q = load(RF "  nodeTaints:\n  - {key: spot, value: 'true', effect: NoSchedule}\n"
                "  - {key: s2, effect: PreferNoSchedule}\n  tolerations:\n"
                "  - {key: spot-taint, operator: Exists, effect: NoSchedule}\n"
                "  - {operator: Exists, effect: NoExecute, tolerationSeconds: 30}\n",
             &d);
    CHECK(q && q->flavors[0].n_node_taints == 2 && q->flavors[0].n_tolerations == 2 &&
          strcmp(q->flavors[0].node_taints[0].value, "true") == 0 &&
          q->flavors[0].node_taints[1].value == NULL &&
          strcmp(q->flavors[0].tolerations[0].op, "Exists") == 0 &&
          q->flavors[0].tolerations[1].key == NULL &&
          q->flavors[0].tolerations[1].has_toleration_seconds &&
          q->flavors[0].tolerations[1].toleration_seconds == 30);
    if (q) {
        /* Kueue's admission check: NoSchedule and NoExecute taints only
         * (s2's PreferNoSchedule is ignored), the flavor's own tolerations
         * counted with the workload's */
        kiln_toleration spot = {.key = "spot", .op = "Exists"};
        const kiln_taint *t = kiln_queues_flavor_untolerated(&q->flavors[0], NULL, 0);
        CHECK(t && strcmp(t->key, "spot") == 0);
        CHECK(kiln_queues_flavor_untolerated(&q->flavors[0], &spot, 1) == NULL);
        /* under --slurm-queues accounts Slurm admits: both are meaningless;
         * under --executor slurm kiln admits, and honours them */
        kiln_diag sd = KILN_DIAG_INIT;
        kiln_queues_slurm_refusals(q, false, &sd);
        CHECK(has_field(&sd, "ResourceFlavor spot: spec.nodeTaints") &&
              has_field(&sd, "ResourceFlavor spot: spec.tolerations"));
        kiln_diag_free(&sd);
        CHECK(kiln_queues_steps_refusals(q, &sd) == 0);
        kiln_diag_free(&sd);
    }
    kiln_queues_free(q);
    CHECK(load(RF "  nodeTaints:\n  - {key: spot, effect: Never}\n", &d) == NULL &&
          has_field(&d, "ResourceFlavor spot: spec.nodeTaints[0].effect"));
    CHECK(load(RF "  nodeTaints:\n  - {value: x, effect: NoSchedule}\n", &d) == NULL &&
          has_field(&d, "ResourceFlavor spot: spec.nodeTaints[0].key"));
    CHECK(load(RF "  tolerations:\n  - {operator: Equal, value: x}\n", &d) == NULL &&
          has_field(&d, "ResourceFlavor spot: spec.tolerations[0].operator"));
    CHECK(load(RF "  tolerations:\n  - {key: a, effect: NoSchedule, tolerationSeconds: 3}\n", &d) ==
              NULL &&
          has_field(&d, "ResourceFlavor spot: spec.tolerations[0].effect"));
#undef RF
    CHECK(load("apiVersion: kueue.x-k8s.io/v1beta3\nkind: ResourceFlavor\nmetadata:\n  name: x\n",
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

    /* both API versions: each example (v1beta2) and its v1beta1 spelling in
     * tests/data read into the same model, seen through the v1beta2 writer */
    static const char *const examples[] = {"two-teams.yaml", "single-clusterqueue.yaml"};
    for (size_t e = 0; e < 2; e++) {
        char p2[512], p1[512];
        snprintf(p2, sizeof p2, "%s/examples/queues/%s", KILN_SOURCE_DIR, examples[e]);
        snprintf(p1, sizeof p1, "%s/tests/data/queues/v1beta1/%s", KILN_SOURCE_DIR, examples[e]);
        kiln_queues *q2 = NULL, *q1 = NULL;
        kiln_diag_clear(&d);
        CHECK(kiln_queues_load_file(p2, &q2, &d) == KILN_OK);
        CHECK(kiln_queues_load_file(p1, &q1, &d) == KILN_OK);
        kiln_diag_print(&d, stderr);
        CHECK(q1 && q2 && q1->ncqs == q2->ncqs && q1->nlqs == q2->nlqs && q2->ncqs > 0);
        for (size_t c = 0; q1 && q2 && c < q2->ncqs && c < q1->ncqs; c++) {
            json_t *o1 = kiln_queues_cq_v1beta2(q1, c, false);
            json_t *o2 = kiln_queues_cq_v1beta2(q2, c, false);
            CHECK(o1 && o2 && json_equal(o1, o2));
            CHECK_STR(json_string_value(json_object_get(o2, "apiVersion")),
                      "kueue.x-k8s.io/v1beta2");
            /* the written object loads back (JSON is YAML) into the same ClusterQueue */
            char *txt = json_dumps(o2, JSON_COMPACT);
            char *flv = NULL;
            json_t *fo =
                json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", "kueue.x-k8s.io/v1beta2", "kind",
                          "ResourceFlavor", "metadata", "name", q2->flavors[0].name);
            flv = json_dumps(fo, JSON_COMPACT);
            snprintf(all, sizeof all, "%s\n---\n%s\n", flv, txt);
            kiln_queues *q3 = load(all, &d);
            kiln_diag_print(&d, stderr);
            CHECK(q3 != NULL);
            if (q3) {
                json_t *o3 = kiln_queues_cq_v1beta2(q3, 0, false);
                CHECK(o3 && json_equal(o2, o3));
                json_decref(o3);
            }
            kiln_queues_free(q3);
            free(txt);
            free(flv);
            json_decref(fo);
            json_decref(o1);
            json_decref(o2);
        }
        if (e == 0 && q2) {
            CHECK_STR(q2->cqs[0].cohort, "lab");
            json_t *o = kiln_queues_cq_v1beta2(q2, 0, true);
            json_t *spec = json_object_get(o, "spec");
            CHECK_STR(json_string_value(json_object_get(spec, "cohortName")), "lab");
            CHECK(json_object_get(spec, "cohort") == NULL);
            CHECK_STR(json_string_value(json_object_get(json_object_get(spec, "flavorFungibility"),
                                                        "whenCanBorrow")),
                      "MayStopSearch");
            CHECK_STR(json_string_value(json_object_get(json_object_get(spec, "preemption"),
                                                        "reclaimWithinCohort")),
                      "Never");
            CHECK(json_object_get(json_object_get(o, "status"), "flavorsUsage") != NULL);
            json_decref(o);
        }
        kiln_queues_free(q1);
        kiln_queues_free(q2);
    }
    q = NULL;

    /* each version's own names; the other version's refused, naming it */
#define HDR2 "apiVersion: kueue.x-k8s.io/v1beta2\n"
#define CQ2(extra)                                                                                 \
    HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" HDR2                               \
         "kind: ClusterQueue\nmetadata:\n  name: x\nspec:\n" extra                                 \
         "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\"]\n    flavors:\n"           \
         "    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n"                      \
         "        nominalQuota: 2\n"
    q = load(CQ2("  cohort: lab\n"), &d);
    CHECK(!q && has_field(&d, "ClusterQueue x: spec.cohort"));
    CHECK(d.n > 0 && strstr(d.v[0].description, "cohortName") != NULL);
    q = load(CQ2("  cohortName: lab\n"), &d);
    CHECK(q && q->cqs[0].cohort && strcmp(q->cqs[0].cohort, "lab") == 0);
    kiln_queues_free(q);
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "x", NULL, "2", NULL, "  cohortName: lab\n"));
    q = load(all, &d);
    CHECK(!q && has_field(&d, "ClusterQueue x: spec.cohortName"));
    /* a Cohort was v1alpha1 before Kueue v0.13 (read the same); a
     * ClusterQueue never was */
    q = load("apiVersion: kueue.x-k8s.io/v1alpha1\nkind: Cohort\nmetadata:\n  name: c\n", &d);
    CHECK(q && q->cohorts.n == 1);
    kiln_queues_free(q);
    q = load("apiVersion: kueue.x-k8s.io/v1alpha1\nkind: ClusterQueue\nmetadata:\n  name: c\n", &d);
    CHECK(!q && has_field(&d, "apiVersion") && strstr(d.v[0].description, "v1beta2") != NULL);
    /* borrowingLimit without a cohort names the version's field */
    q = load(CQ2("") "        borrowingLimit: 1\n", &d);
    CHECK(!q && d.n == 1 && strstr(d.v[0].description, "spec.cohortName") != NULL);
    /* admission checks: refused with the reason, in either version */
    q = load(CQ2("  admissionChecksStrategy:\n    admissionChecks:\n    - name: prov\n"), &d);
    CHECK(!q && has_field(&d, "spec.admissionChecksStrategy") &&
          strstr(d.v[0].description, "ProvisioningRequest") != NULL && d.n == 1);
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "x", NULL, "2", NULL, "  admissionChecks: [p]\n"));
    q = load(all, &d);
    CHECK(!q && has_field(&d, "ClusterQueue x: spec.admissionChecks") && d.n == 1);

    /* flavorFungibility: v1beta1's Borrow is v1beta2's MayStopSearch; Preempt
     * / MayStopSearch for whenCanPreempt are refused (kiln preempts only once
     * no flavor fits) */
    snprintf(all, sizeof all, "%s%s", FLAVOR,
             cq(a, sizeof a, "x", "lab", "2", NULL,
                "  flavorFungibility:\n    whenCanBorrow: Borrow\n"
                "    whenCanPreempt: TryNextFlavor\n"));
    q = load(all, &d);
    kiln_diag_print(&d, stderr);
    CHECK(q && !q->cqs[0].borrow_try_next);
    kiln_queues_free(q);
    q = load(CQ2("  flavorFungibility:\n    whenCanBorrow: Borrow\n"), &d);
    CHECK(!q && has_field(&d, "spec.flavorFungibility.whenCanBorrow"));
    q = load(CQ2("  flavorFungibility:\n    whenCanPreempt: MayStopSearch\n"), &d);
    CHECK(!q && has_field(&d, "spec.flavorFungibility.whenCanPreempt"));
    q = load(CQ2("  flavorFungibility:\n    preference: BorrowingOverPreemption\n"), &d);
    CHECK(!q && has_field(&d, "spec.flavorFungibility.preference"));
    /* whenCanBorrow: the first flavor fits only by borrowing, the second
     * without: MayStopSearch takes the first, TryNextFlavor the second */
    for (int t = 0; t < 2; t++) {
        snprintf(all, sizeof all,
                 HDR2 "kind: ResourceFlavor\nmetadata:\n  name: f1\n---\n" HDR2
                      "kind: ResourceFlavor\nmetadata:\n  name: f2\n---\n" HDR2
                      "kind: ClusterQueue\nmetadata:\n  name: x\nspec:\n  cohortName: lab\n"
                      "  flavorFungibility:\n    whenCanBorrow: %s\n"
                      "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\"]\n"
                      "    flavors:\n    - name: f1\n      resources:\n"
                      "      - name: nvidia.com/gpu\n        nominalQuota: 1\n"
                      "    - name: f2\n      resources:\n"
                      "      - name: nvidia.com/gpu\n        nominalQuota: 2\n---\n" HDR2
                      "kind: ClusterQueue\nmetadata:\n  name: y\nspec:\n  cohortName: lab\n"
                      "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\"]\n"
                      "    flavors:\n    - name: f1\n      resources:\n"
                      "      - name: nvidia.com/gpu\n        nominalQuota: 4\n",
                 t ? "TryNextFlavor" : "MayStopSearch");
        q = load(all, &d);
        kiln_diag_print(&d, stderr);
        kiln_qassign as;
        CHECK(q && kiln_queues_fit(q, 0, GPUS2, NULL, &as, why, sizeof why));
        if (q) {
            CHECK_STR(q->flavors[as.flavor[0]].name, t ? "f2" : "f1");
            CHECK(as.borrows == !t);
            /* with f2 full too, TryNextFlavor falls back to borrowing in f1 */
            kiln_queues_charge(q, 0, &as, GPUS2, 1);
            if (t) {
                CHECK(kiln_queues_fit(q, 0, GPUS2, NULL, &as, why, sizeof why));
                CHECK_STR(q->flavors[as.flavor[0]].name, "f1");
                CHECK(as.borrows);
            }
        }
        kiln_queues_free(q);
    }
    q = NULL;

    /* pods: a job's replicas counted against the ClusterQueue's quota */
    snprintf(all, sizeof all,
             HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" HDR2
                  "kind: ClusterQueue\nmetadata:\n  name: x\nspec:\n  namespaceSelector: {}\n"
                  "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\", pods]\n"
                  "    flavors:\n    - name: v100\n      resources:\n"
                  "      - name: nvidia.com/gpu\n        nominalQuota: 8\n"
                  "      - name: pods\n        nominalQuota: 3\n");
    q = load(all, &d);
    kiln_diag_print(&d, stderr);
    CHECK(q && q->cqs[0].groups[0].covers[KILN_QRES_PODS] &&
          q->cqs[0].groups[0].flavors[0].q[KILN_QRES_PODS].nominal == 3);
    if (q) {
        /* a chief and two workers of 1 GPU each: 3 pods, 3 GPUs */
        kiln_replica_plan pl[2] = {
            {.count = 1, .accelerator_type = "NVIDIA_TESLA_V100", .accelerators_per_replica = 1},
            {.count = 2, .accelerator_type = "NVIDIA_TESLA_V100", .accelerators_per_replica = 1}};
        int64_t req[KILN_QRES_COUNT];
        kiln_queues_request(pl, 2, req);
        CHECK(req[KILN_QRES_PODS] == 3 && req[KILN_QRES_GPU] == 3);
        kiln_diag sd = KILN_DIAG_INIT;
        CHECK(kiln_queues_slurm_refusals(q, true, &sd) == 1 &&
              has_field(&sd, "coveredResources pods"));
        kiln_diag_free(&sd);
        kiln_qassign as;
        CHECK(kiln_queues_fit(q, 0, req, NULL, &as, why, sizeof why));
        kiln_queues_charge(q, 0, &as, req, 1);
        /* 5 GPUs are free but no pod: a 1-replica job waits, saying pods */
        kiln_queues_request(pl, 1, req);
        CHECK(!kiln_queues_fit(q, 0, req, NULL, &as, why, sizeof why));
        CHECK(strstr(why, "pods") != NULL);
        fprintf(stderr, "pods: %s\n", why);
        json_t *o = kiln_queues_cq_v1beta2(q, 0, true);
        char *txt = json_dumps(o, JSON_COMPACT);
        CHECK(txt && strstr(txt, "{\"name\":\"pods\",\"nominalQuota\":\"3\"}") != NULL);
        free(txt);
        json_decref(o);
    }
    kiln_queues_free(q);
    q = load(CQ2("") "      - name: pods\n        nominalQuota: 1\n", &d);
    CHECK(!q && has_field(&d, "resources"));
    q = load(HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" HDR2
                  "kind: ClusterQueue\nmetadata:\n  name: x\nspec:\n"
                  "  resourceGroups:\n  - coveredResources: [pods]\n"
                  "    flavors:\n    - name: v100\n      resources:\n"
                  "      - name: pods\n        nominalQuota: 1500m\n",
             &d);
    CHECK(!q && has_field(&d, "nominalQuota") && strstr(d.v[0].description, "whole pods"));

    /* a ClusterQueue with no resourceGroups (or no spec): accepted, covers
     * nothing; a GPU job routed to it is refused at submit */
    q = load(HDR2 "kind: ClusterQueue\nmetadata:\n  name: empty\nspec:\n  namespaceSelector: {}\n"
                  "---\n" HDR2 "kind: ClusterQueue\nmetadata:\n  name: bare\n---\n" HDR2
                  "kind: LocalQueue\nmetadata:\n  namespace: p\n  name: default\nspec:\n"
                  "  clusterQueue: empty\n",
             &d);
    kiln_diag_print(&d, stderr);
    CHECK(q && q->ncqs == 2 && q->cqs[0].ngroups == 0 && q->cqs[1].ngroups == 0);
    if (q) {
        kiln_qassign as;
        CHECK(!kiln_queues_fit(q, 0, GPUS1, NULL, &as, why, sizeof why) &&
              strstr(why, "does not cover nvidia.com/gpu"));
    }
    kiln_queues_free(q);

    /* Kueue's kinds kiln has no meaning for: refused naming the reason */
    static const char *const kinds[][2] = {{"AdmissionCheck", "MultiKueue"},
                                           {"MultiKueueConfig", "MultiKueue"},
                                           {"MultiKueueCluster", "MultiKueue"},
                                           {"ProvisioningRequestConfig", "autoscaler"}};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        snprintf(all, sizeof all, HDR2 "kind: %s\nmetadata:\n  name: k\nspec: {}\n", kinds[i][0]);
        q = load(all, &d);
        CHECK(!q && d.n == 1 && has_field(&d, "kind") &&
              strstr(d.v[0].description, kinds[i][1]) != NULL);
    }
    q = NULL;

    /* kiln's own files in the shapes of Kueue's examples (both releases):
     * each says on its first line "# expect: loads" or "# expect: refused
     * FIELD", the first violation's field, so a refusal is only where docs
     * give the reason */
    {
        const char *dir = KILN_SOURCE_DIR "/tests/data/queues/kueue-shapes";
        DIR *dd = opendir(dir);
        CHECK(dd != NULL);
        struct dirent *e;
        size_t seen = 0;
        while (dd && (e = readdir(dd))) {
            size_t n = strlen(e->d_name);
            if (n < 6 || strcmp(e->d_name + n - 5, ".yaml") != 0) continue;
            char p[700], first[300] = "";
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            FILE *f = fopen(p, "r");
            CHECK(f && fgets(first, sizeof first, f));
            if (f) fclose(f);
            first[strcspn(first, "\n")] = 0;
            const char *paths[1] = {p};
            kiln_diag_clear(&d);
            kiln_err le = kiln_queues_load_paths(paths, 1, &q, &d);
            bool ok;
            if (strcmp(first, "# expect: loads") == 0) {
                ok = le == KILN_OK && q;
            } else if (strncmp(first, "# expect: refused ", 18) == 0) {
                char want[1100];
                snprintf(want, sizeof want, "%s: %s", p, first + 18);
                ok = le != KILN_OK && !q && d.n >= 1 && strcmp(d.v[0].field, want) == 0;
            } else {
                ok = false;
            }
            if (!ok) {
                fprintf(stderr, "%s: not as '%s' says:\n", e->d_name, first);
                kiln_diag_print(&d, stderr);
            }
            CHECK(ok);
            kiln_queues_free(q);
            q = NULL;
            seen++;
        }
        if (dd) closedir(dd);
        CHECK(seen >= 10);
    }

    /* hierarchical cohorts: org (its own 2 GPUs) over team-x and team-y
     * (team-y may borrow at most 2 from org) over x1, x2, y1, y2 (2 each):
     * 10 GPUs in all */
#define COHORT(name, extra) HDR2 "kind: Cohort\nmetadata:\n  name: " name "\nspec:\n" extra "---\n"
#define GPUQ(indent, n, more)                                                                      \
    indent "resourceGroups:\n" indent "- coveredResources: [\"nvidia.com/gpu\"]\n" indent          \
           "  flavors:\n" indent "  - name: v100\n" indent "    resources:\n" indent               \
           "    - name: nvidia.com/gpu\n" indent "      nominalQuota: " n "\n" more
#define TREECQ(name, cohort)                                                                       \
    HDR2 "kind: ClusterQueue\nmetadata:\n  name: " name "\nspec:\n  cohortName: " cohort           \
         "\n  namespaceSelector: {}\n" GPUQ("  ", "2", "") "---\n"
    {
        static const char tree[] =
            HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" COHORT(
                "org", GPUQ("  ", "2", "")) COHORT("team-x", "  parentName: org\n")
                COHORT("team-y",
                       "  parentName: org\n" GPUQ("  ", "0", "        borrowingLimit: 2\n"))
                    TREECQ("x1", "team-x") TREECQ("x2", "team-x") TREECQ("y1", "team-y")
                        TREECQ("y2", "team-y");
        q = load(tree, &d);
        kiln_diag_print(&d, stderr);
        CHECK(q && q->ncqs == 4 && q->ncnodes == 3);
        if (q) {
            const kiln_qres G = KILN_QRES_GPU;
            CHECK(q->cnodes[1].parent == 0 && q->cnodes[2].parent == 0 &&
                  q->cnodes[0].parent == -1);
            CHECK(kiln_queues_cohort_quota(q, 0, 0, G) == 10);
            /* x1 may use the whole tree; y1 its team's 4 and 2 from org */
            CHECK(kiln_queues_available(q, 0, 0, G, true) == 10);
            CHECK(kiln_queues_available(q, 2, 0, G, true) == 6);
            CHECK(kiln_queues_same_tree(q, 0, 3) && kiln_queues_same_tree(q, 1, 2));
            /* x1 takes 6: x2's 2 and org's 2 borrowed; team-y still has its own 4 */
            const int64_t six[KILN_QRES_COUNT] = {6, 0, 0, 0};
            kiln_qassign as;
            CHECK(kiln_queues_fit(q, 0, six, NULL, &as, why, sizeof why) && as.borrows);
            kiln_queues_charge(q, 0, &as, six, 1);
            CHECK(kiln_queues_cohort_usage(q, 0, 0, G) == 6);
            CHECK(kiln_queues_available(q, 2, 0, G, false) == 4);
            CHECK(kiln_queues_available(q, 1, 0, G, false) == 4);
            /* y1 takes its team's 4; then nothing is left anywhere */
            const int64_t four[KILN_QRES_COUNT] = {4, 0, 0, 0};
            kiln_qassign ay;
            CHECK(kiln_queues_fit(q, 2, four, NULL, &ay, why, sizeof why));
            kiln_queues_charge(q, 2, &ay, four, 1);
            CHECK(!kiln_queues_fit(q, 3, GPUS1, NULL, &as, why, sizeof why));
            CHECK(strstr(why, "cohort team-y has 0 left to lend") != NULL);
            CHECK(!kiln_queues_fit(q, 1, GPUS1, NULL, &as, why, sizeof why));
            /* x1 gives back 2 (what y2 would reclaim): y2 gets its 2
             * (which y1 borrows now), team-y drawing on org for them */
            const int64_t two[KILN_QRES_COUNT] = {2, 0, 0, 0};
            kiln_qassign ax = {.flavor = {0, -1, -1, -1, -1, -1, -1, -1}};
            kiln_queues_charge(q, 0, &ax, two, -1);
            CHECK(kiln_queues_fit(q, 3, two, NULL, &as, why, sizeof why));
            /* ... but not 3: org has 2 left */
            const int64_t three[KILN_QRES_COUNT] = {3, 0, 0, 0};
            CHECK(!kiln_queues_fit(q, 3, three, NULL, &as, why, sizeof why));
            kiln_queues_reset_usage(q);
            /* a random walk of admissions and releases: never more GPUs held
             * than the tree has, never more by team-y than its 4 + 2, and
             * everything back when all is released */
            int64_t held[4] = {0};
            unsigned seed = 42;
            for (int step = 0; step < 2000; step++) {
                seed = seed * 1103515245u + 12345u;
                size_t c = (seed >> 16) % 4;
                int64_t n = 1 + (int64_t)((seed >> 20) % 3);
                int64_t rq[KILN_QRES_COUNT] = {n, 0, 0, 0};
                kiln_qassign a1 = {.flavor = {0, -1, -1, -1, -1, -1, -1, -1}};
                if ((seed >> 24) % 3 && kiln_queues_fit(q, c, rq, NULL, &a1, why, sizeof why)) {
                    kiln_queues_charge(q, c, &a1, rq, 1);
                    held[c] += n;
                } else if (held[c] >= n) {
                    kiln_qassign back = {.flavor = {0, -1, -1, -1, -1, -1, -1, -1}};
                    kiln_queues_charge(q, c, &back, rq, -1);
                    held[c] -= n;
                }
                int64_t total = held[0] + held[1] + held[2] + held[3];
                if (total > 10 || held[2] + held[3] > 6) {
                    CHECK(total <= 10 && held[2] + held[3] <= 6);
                    break;
                }
            }
            for (size_t c = 0; c < 4; c++) {
                int64_t rq[KILN_QRES_COUNT] = {held[c], 0, 0, 0};
                kiln_qassign a1 = {.flavor = {0, -1, -1, -1, -1, -1, -1, -1}};
                kiln_queues_charge(q, c, &a1, rq, -1);
            }
            CHECK(kiln_queues_cohort_usage(q, 0, 0, G) == 0);
            CHECK(kiln_queues_available(q, 0, 0, G, false) == 10);
        }
        kiln_queues_free(q);
        /* lendingLimit on a team keeps part of its subtree from org */
        static const char lent[] =
            HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" COHORT("org", "")
                COHORT("team-x", "  parentName: org\n" GPUQ("  ", "0", "        lendingLimit: 0\n"))
                    COHORT("team-y", "  parentName: org\n") TREECQ("x1", "team-x")
                        TREECQ("y1", "team-y");
        q = load(lent, &d);
        kiln_diag_print(&d, stderr);
        CHECK(q && kiln_queues_available(q, 1, 0, KILN_QRES_GPU, true) == 2 &&
              kiln_queues_available(q, 0, 0, KILN_QRES_GPU, true) == 4);
        kiln_queues_free(q);
        /* a root's limits, a cycle, a parent with no Cohort object */
        q = load(HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" COHORT(
                     "org", GPUQ("  ", "2", "        borrowingLimit: 1\n")),
                 &d);
        CHECK(!q &&
              has_field(&d, "Cohort org: spec.resourceGroups[0].flavors[0].resources[0]."
                            "borrowingLimit") &&
              strstr(d.v[0].description, "spec.parentName"));
        q = load(COHORT("a", "  parentName: b\n") COHORT("b", "  parentName: a\n"), &d);
        CHECK(!q && has_field(&d, "Cohort a: spec.parentName") &&
              strstr(d.v[0].description, "cycle"));
        q = load(HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" COHORT(
                     "team", "  parentName: nowhere\n") TREECQ("c1", "team") TREECQ("c2", "solo"),
                 &d);
        kiln_diag_print(&d, stderr);
        CHECK(q && q->ncnodes == 3 && q->cnodes[0].parent == 1 &&
              strcmp(q->cnodes[1].name, "nowhere") == 0 && !q->cnodes[1].declared &&
              !kiln_queues_same_tree(q, 0, 1));
        kiln_queues_free(q);
        q = NULL;
    }

    /* admission fair sharing: LocalQueue weights, admissionScope, decay */
    {
        static const char afs[] =
            HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" HDR2
                 "kind: ClusterQueue\nmetadata:\n  name: shared\nspec:\n  namespaceSelector: {}\n"
                 "  admissionScope:\n    admissionMode: UsageBasedAdmissionFairSharing\n" GPUQ(
                     "  ", "4",
                     "") "---\n" HDR2
                         "kind: LocalQueue\nmetadata:\n  namespace: a\n  name: default\nspec:\n"
                         "  clusterQueue: shared\n---\n" HDR2
                         "kind: LocalQueue\nmetadata:\n  namespace: b\n  name: default\nspec:\n"
                         "  clusterQueue: shared\n  fairSharing:\n    weight: \"2\"\n";
        q = load(afs, &d);
        kiln_diag_print(&d, stderr);
        CHECK(q && q->cqs[0].afs && q->lqs[0].weight == 1 && q->lqs[1].weight == 2);
        if (q) {
            /* under --slurm-queues accounts Slurm orders the jobs: refused */
            kiln_diag sd = KILN_DIAG_INIT;
            CHECK(kiln_queues_slurm_refusals(q, true, &sd) == 1 &&
                  has_field(&sd, "ClusterQueue shared: spec.admissionScope"));
            kiln_diag_free(&sd);
            /* nothing used: equal shares */
            CHECK(kiln_queues_afs_share(q, 0) == 0 && kiln_queues_afs_share(q, 1) == 0);
            /* an admission's entry penalty: alpha x its request */
            kiln_queues_afs_penalty(q, 0, GPUS2);
            double alpha = 1.0 - pow(0.5, KILN_AFS_SAMPLING_S / KILN_AFS_HALF_LIFE_S);
            CHECK(fabs(kiln_queues_afs_share(q, 0) - 2 * alpha) < 1e-12);
            /* b runs 2 GPUs for one half-life: its consumed goes half way to 2,
             * counted half (weight 2) */
            const int64_t t0 = 1000000000LL;
            kiln_queues_afs_sample(q, t0);
            kiln_queues_lq_charge(q, 1, GPUS2, 1);
            kiln_queues_afs_sample(q, t0 + (int64_t)(KILN_AFS_HALF_LIFE_S * 1e9));
            CHECK(fabs(q->lqs[1].consumed[KILN_QRES_GPU] - 1.0) < 1e-9);
            CHECK(fabs(kiln_queues_afs_share(q, 1) - 0.5) < 1e-9);
            /* a's penalty decayed by half in the same time (it ran nothing) */
            CHECK(fabs(q->lqs[0].consumed[KILN_QRES_GPU] - alpha) < 1e-12);
            CHECK(kiln_queues_afs_share(q, 0) < kiln_queues_afs_share(q, 1));
            /* reset_usage clears what runs now, not what was consumed */
            kiln_queues_reset_usage(q);
            CHECK(q->lqs[1].running[KILN_QRES_GPU] == 0 && q->lqs[1].consumed[KILN_QRES_GPU] > 0.9);
            /* a reload carries the consumed usage over, by namespace and name */
            kiln_queues *q2 = load(afs, &d);
            CHECK(q2 && q2->lqs[1].consumed[KILN_QRES_GPU] == 0);
            if (q2) {
                kiln_queues_afs_carry(q2, q);
                CHECK(fabs(q2->lqs[1].consumed[KILN_QRES_GPU] - 1.0) < 1e-9 &&
                      q2->lqs[1].sampled_ns == q->lqs[1].sampled_ns);
            }
            kiln_queues_free(q2);
            json_t *o = kiln_queues_cq_v1beta2(q, 0, false);
            CHECK_STR(json_string_value(json_object_get(
                          json_object_get(json_object_get(o, "spec"), "admissionScope"),
                          "admissionMode")),
                      "UsageBasedAdmissionFairSharing");
            json_decref(o);
        }
        kiln_queues_free(q);
        /* without admissionScope nothing is sampled */
        q = load(HDR2
                 "kind: ResourceFlavor\nmetadata:\n  name: v100\n---\n" HDR2
                 "kind: ClusterQueue\nmetadata:\n  name: plain\nspec:\n"
                 "  admissionScope:\n    admissionMode: NoAdmissionFairSharing\n" GPUQ(
                     "  ", "4",
                     "") "---\n" HDR2
                         "kind: LocalQueue\nmetadata:\n  namespace: a\n  name: default\nspec:\n"
                         "  clusterQueue: plain\n",
                 &d);
        CHECK(q && !q->cqs[0].afs);
        if (q) {
            kiln_queues_afs_penalty(q, 0, GPUS2);
            CHECK(kiln_queues_afs_share(q, 0) == 0);
        }
        kiln_queues_free(q);
        /* a LocalQueue weight its ClusterQueue would not use: refused */
        q = load(HDR2 "kind: ClusterQueue\nmetadata:\n  name: x\n---\n" HDR2
                      "kind: LocalQueue\nmetadata:\n  namespace: a\n  name: default\nspec:\n"
                      "  clusterQueue: x\n  fairSharing:\n    weight: 2\n",
                 &d);
        CHECK(!q && has_field(&d, "LocalQueue a/default: spec.fairSharing") &&
              strstr(d.v[0].description, "admissionScope"));
        q = load(HDR2 "kind: ClusterQueue\nmetadata:\n  name: x\nspec:\n"
                      "  admissionScope:\n    admissionMode: Fair\n",
                 &d);
        CHECK(!q && has_field(&d, "ClusterQueue x: spec.admissionScope.admissionMode"));
        q = NULL;
    }

    /* --queues PATH...: files and directories read as one set */
    {
        char dir[] = "/tmp/kiln_tq_XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        char p[600], sub[600];
        FILE *f;
#define PUT(name, text)                                                                            \
    do {                                                                                           \
        snprintf(p, sizeof p, "%s/%s", dir, name);                                                 \
        f = fopen(p, "w");                                                                         \
        CHECK(f != NULL);                                                                          \
        if (f) {                                                                                   \
            fputs(text, f);                                                                        \
            fclose(f);                                                                             \
        }                                                                                          \
    } while (0)
        snprintf(sub, sizeof sub, "%s/conf", dir);
        CHECK(mkdir(sub, 0700) == 0);
        /* the flavor in one file, the ClusterQueue using it in another */
        PUT("conf/10-flavor.yaml", HDR2 "kind: ResourceFlavor\nmetadata:\n  name: v100\n");
        PUT("conf/20-cq.yml",
            HDR2 "kind: ClusterQueue\nmetadata:\n  name: x\nspec:\n  namespaceSelector: {}\n"
                 "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\"]\n    flavors:\n"
                 "    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n"
                 "        nominalQuota: 2\n");
        PUT("conf/notes.txt", "not yaml: ignored");
        PUT("conf/.#20-cq.yml", "an editor's lock file: ignored");
        PUT("lq.yaml", HDR2 "kind: LocalQueue\nmetadata:\n  namespace: p\n  name: default\n"
                            "spec:\n  clusterQueue: x\n");
        snprintf(p, sizeof p, "%s/lq.yaml", dir);
        const char *paths[3] = {sub, p, NULL};
        kiln_diag_clear(&d);
        CHECK(kiln_queues_load_paths(paths, 2, &q, &d) == KILN_OK);
        kiln_diag_print(&d, stderr);
        CHECK(q && q->nflavors == 1 && q->ncqs == 1 && q->nlqs == 1 && q->lqs[0].cq == 0);
        kiln_queues_free(q);
        q = NULL;
        /* the directory alone: the LocalQueue is not in it */
        CHECK(kiln_queues_load_paths(paths, 1, &q, &d) == KILN_OK && q && q->nlqs == 0);
        kiln_queues_free(q);
        q = NULL;
        /* the file alone: its ClusterQueue is in no file given */
        kiln_diag_clear(&d);
        CHECK(kiln_queues_load_paths(paths + 1, 1, &q, &d) == KILN_EINVAL && !q &&
              has_field(&d, "LocalQueue p/default: spec.clusterQueue"));
        /* a second --queues naming an object again: defined twice, at its file */
        const char *twice[2] = {sub, sub};
        kiln_diag_clear(&d);
        CHECK(kiln_queues_load_paths(twice, 2, &q, &d) == KILN_EINVAL && !q);
        snprintf(p, sizeof p, "%s/conf/20-cq.yml: ClusterQueue x: metadata.name", dir);
        CHECK(has_field(&d, p));
        /* one bad file refuses the whole set, naming the file and the field */
        PUT("conf/30-bad.yaml", HDR2 "kind: ResourceFlavor\nmetadata:\n  name: t4\nspec:\n"
                                     "  colour: blue\n");
        kiln_diag_clear(&d);
        CHECK(kiln_queues_load_paths(paths, 2, &q, &d) == KILN_EINVAL && !q);
        snprintf(p, sizeof p, "%s/conf/30-bad.yaml: ResourceFlavor t4: spec.colour", dir);
        CHECK(has_field(&d, p));
        /* a YAML syntax error is named at its file too */
        PUT("conf/30-bad.yaml", "a: [\n");
        kiln_diag_clear(&d);
        CHECK(kiln_queues_load_paths(paths, 2, &q, &d) != KILN_OK && !q);
        snprintf(p, sizeof p, "%s/conf/30-bad.yaml", dir);
        CHECK(d.n > 0 && strncmp(d.v[0].field, p, strlen(p)) == 0);
        snprintf(p, sizeof p, "%s/conf/30-bad.yaml", dir);
        unlink(p);
        /* a missing path; a directory with no YAML in it */
        const char *missing[1] = {"/nonexistent/kiln-queues"};
        kiln_diag_clear(&d);
        CHECK(kiln_queues_load_paths(missing, 1, &q, &d) != KILN_OK && !q &&
              has_field(&d, "/nonexistent/kiln-queues"));
        snprintf(p, sizeof p, "%s/empty", dir);
        CHECK(mkdir(p, 0700) == 0);
        const char *empty[1] = {p};
        kiln_diag_clear(&d);
        CHECK(kiln_queues_load_paths(empty, 1, &q, &d) != KILN_OK && !q && d.n == 1 &&
              strstr(d.v[0].description, "no *.yaml") != NULL);
        rmdir(p);
        static const char *const rm[] = {"conf/10-flavor.yaml", "conf/20-cq.yml", "conf/notes.txt",
                                         "conf/.#20-cq.yml", "lq.yaml"};
        for (size_t i = 0; i < sizeof rm / sizeof *rm; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, rm[i]);
            unlink(p);
        }
        rmdir(sub);
        rmdir(dir);
#undef PUT
    }

    kiln_diag_free(&d);
    TEST_DONE();
}

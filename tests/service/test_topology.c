/* tests/service/test_topology.c - topology-aware scheduling (Kueue's TAS):
 * the Topology kind and a flavor's topologyName in the queues file
 * (src/queues/qload.c), a pod template's Kueue annotations through the Job
 * model and its JSON, and placement by topology (src/sched/topo.c through
 * kiln_sched_place_rules) on the cluster: 2 blocks x 2 racks x 2
 * nodes x 4 GPUs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/queues.h"
#include "kiln/sched.h"
#include "plan_fixture.h"
#include "test.h"

#define BLOCK "cloud.provider.com/topology-block"
#define RACK  "cloud.provider.com/topology-rack"
#define HOST  "kubernetes.io/hostname"
#define V100  "NVIDIA_TESLA_V100"

static const char *const levels[] = {BLOCK, RACK, HOST};

/* b1-r1-n1 .. b2-r2-n2, in that order: node i is block i/4, rack i/2 */
static bool load_cluster(kiln_cluster *c)
{
    char json[4096];
    size_t at = (size_t)snprintf(json, sizeof json, "{\"nodes\": [");
    for (int i = 0; i < 8; i++)
        at += (size_t)snprintf(json + at, sizeof json - at,
                               "%s{\"name\": \"b%d-r%d-n%d\", \"labels\": {\"" BLOCK
                               "\": \"block-%d\", \"" RACK "\": \"rack-%d\"},"
                               " \"accelerators\": [{\"type\": \"" V100 "\", \"count\": 4}]}",
                               i ? ", " : "", i / 4 + 1, i / 2 % 2 + 1, i % 2 + 1, i / 4 + 1,
                               i / 2 % 2 + 1);
    snprintf(json + at, sizeof json - at, "]}");
    kiln_diag d = KILN_DIAG_INIT;
    bool ok = kiln_cluster_from_json(json, strlen(json), c, &d) == KILN_OK;
    if (!ok) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    return ok;
}

static kiln_sched_rules rules(kiln_role r, const char *req, const char *pref)
{
    kiln_sched_rules ru = {0};
    ru.has_topo[r] = true;
    ru.topo[r].required = (char *)req;
    ru.topo[r].preferred = (char *)pref;
    ru.topo[r].unconstrained = !req && !pref;
    ru.topology = "default";
    ru.levels = levels;
    ru.n_levels = 3;
    return ru;
}

/* The label `key` every slot's node has in common, or NULL. */
static const char *shared(const kiln_cluster *c, const kiln_placement *p, const char *key)
{
    const char *v = NULL;
    for (size_t i = 0; i < p->n; i++) {
        const char *w = kiln_map_get(&c->nodes[p->slots[i].node].labels, key);
        if (!w || (v && strcmp(v, w) != 0)) return NULL;
        v = w;
    }
    return v;
}

static size_t nodes_used(const kiln_placement *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen |= p->slots[j].node == p->slots[i].node;
        n += !seen;
    }
    return n;
}

/* Takes `count` GPUs of node `node` (another job's replica). */
static void occupy(kiln_sched *s, size_t node, int count, kiln_placement *hold)
{
    hold->slots = calloc(1, sizeof *hold->slots);
    hold->n = 1;
    hold->slots[0].node = node;
    hold->slots[0].n_devs = count;
    for (int j = 0; j < count; j++)
        hold->slots[0].devs[j] = j;
    kiln_sched_claim(s, hold);
}

static void release(kiln_sched *s, kiln_placement *p)
{
    kiln_sched_release(s, p);
    kiln_placement_free(p);
}

static void placement(void)
{
    kiln_cluster c;
    CHECK(load_cluster(&c));
    kiln_sched *s = kiln_sched_new(&c);
    kiln_placement p = {0}, q = {0}, busy[4] = {{0}};
    char why[512];
    kiln_sched_rules rack = rules(KILN_ROLE_WORKER, RACK, NULL);
    kiln_sched_rules block = rules(KILN_ROLE_WORKER, BLOCK, NULL);
    kiln_replica_plan w2x4[2] = {plan(KILN_ROLE_MASTER, 0, NULL, 0),
                                 plan(KILN_ROLE_WORKER, 2, V100, 4)};
    kiln_replica_plan w8x1[2] = {plan(KILN_ROLE_MASTER, 0, NULL, 0),
                                 plan(KILN_ROLE_WORKER, 8, V100, 1)};
    kiln_replica_plan w4x4[2] = {plan(KILN_ROLE_MASTER, 0, NULL, 0),
                                 plan(KILN_ROLE_WORKER, 4, V100, 4)};

    /* 8 GPUs requiring a rack: one rack's two nodes, as 2 x 4 or 8 x 1 */
    CHECK(kiln_sched_place_rules(s, w2x4, 2, &rack, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 2 && shared(&c, &p, RACK) && shared(&c, &p, BLOCK) && nodes_used(&p) == 2);
    release(s, &p);
    CHECK(kiln_sched_place_rules(s, w8x1, 2, &rack, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 8 && shared(&c, &p, RACK) && shared(&c, &p, BLOCK) && nodes_used(&p) == 2);
    release(s, &p);
    /* 16 GPUs requiring a block: inside one block, all four of its nodes */
    CHECK(kiln_sched_place_rules(s, w4x4, 2, &block, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 4 && shared(&c, &p, BLOCK) && !shared(&c, &p, RACK) && nodes_used(&p) == 4);
    release(s, &p);
    /* 16 GPUs requiring a rack can never fit: a rack has 8 */
    CHECK(kiln_sched_place_rules(s, w4x4, 2, &rack, &p, why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, RACK) && strstr(why, "the largest one holds 2 of their 4") &&
                  strstr(why, "Topology default"),
              "%s", why);

    /* one rack busy, and one GPU taken in each other rack: a rack-level
     * gang of 2 x 4 waits, saying which level is short */
    CHECK(kiln_sched_place_rules(s, w2x4, 2, &rack, &q, why, sizeof why) == KILN_OK);
    size_t full = q.slots[0].node / 2;
    for (size_t r = 0, k = 0; r < 4; r++)
        if (r != full) occupy(s, r * 2, 1, &busy[k++]);
    CHECK(kiln_sched_place_rules(s, w2x4, 2, &rack, &p, why, sizeof why) == KILN_ECONFLICT);
    CHECK_MSG(strstr(why, RACK) && strstr(why, "the freest one now holds 1 of their 2") &&
                  strstr(why, "waiting for room at that level"),
              "%s", why);
    /* preferring a rack, it takes the next level up: one block's two racks */
    kiln_sched_rules pref = rules(KILN_ROLE_WORKER, NULL, RACK);
    CHECK(kiln_sched_place_rules(s, w2x4, 2, &pref, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 2 && shared(&c, &p, BLOCK) && !shared(&c, &p, RACK));
    release(s, &p);
    /* a block has room for 2 of 4 now: a 4 x 4 preferring a block spreads
     * over the fewest blocks (two), the fullest first */
    kiln_sched_rules prefb = rules(KILN_ROLE_WORKER, NULL, BLOCK);
    CHECK(kiln_sched_place_rules(s, w4x4, 2, &prefb, &p, why, sizeof why) == KILN_ECONFLICT);
    release(s, &q);
    for (int k = 0; k < 3; k++)
        release(s, &busy[k]);

    /* best fit: with 2 GPUs of b1-r1-n1 taken, 2 x 4 requiring a block goes
     * to block 1 (room for 3 pods: the tightest that holds 2), and inside it
     * to rack 2 whole, not across b1-r1-n2 and a node of rack 2 (which plain
     * placement's fewest-spare rule would pick) */
    occupy(s, 0, 2, &busy[0]);
    CHECK(kiln_sched_place_rules(s, w2x4, 2, &block, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 2 && shared(&c, &p, BLOCK) && strcmp(shared(&c, &p, BLOCK), "block-1") == 0 &&
          shared(&c, &p, RACK) && strcmp(shared(&c, &p, RACK), "rack-2") == 0);
    release(s, &p);
    /* one 4-GPU pod requiring a rack: rack 1 of block 1 (room for 1), the
     * tightest, before the empty racks */
    kiln_replica_plan w1x4[2] = {plan(KILN_ROLE_MASTER, 0, NULL, 0),
                                 plan(KILN_ROLE_WORKER, 1, V100, 4)};
    CHECK(kiln_sched_place_rules(s, w1x4, 2, &rack, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 1 && p.slots[0].node == 1);
    release(s, &p);
    /* unconstrained: the fewest nodes, fullest first: 3 x 2 GPUs on two
     * nodes (b1-r1-n1's 2 free GPUs are the best fit for the last one) */
    kiln_replica_plan w3x2[2] = {plan(KILN_ROLE_MASTER, 0, NULL, 0),
                                 plan(KILN_ROLE_WORKER, 3, V100, 2)};
    kiln_sched_rules unc = rules(KILN_ROLE_WORKER, NULL, NULL);
    CHECK(kiln_sched_place_rules(s, w3x2, 2, &unc, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 3 && nodes_used(&p) == 2);
    bool on_n1 = false;
    for (size_t i = 0; i < p.n; i++)
        on_n1 |= p.slots[i].node == 0;
    CHECK(on_n1);
    release(s, &p);
    release(s, &busy[0]);

    /* a group: master (1 GPU) and workers (2 x 3) in one rack together */
    kiln_replica_plan mixed[2] = {plan(KILN_ROLE_MASTER, 1, V100, 1),
                                  plan(KILN_ROLE_WORKER, 2, V100, 3)};
    kiln_sched_rules grp = rules(KILN_ROLE_WORKER, RACK, NULL);
    grp.has_topo[KILN_ROLE_MASTER] = true;
    grp.topo[KILN_ROLE_MASTER] = grp.topo[KILN_ROLE_WORKER];
    grp.topo[KILN_ROLE_MASTER].group = grp.topo[KILN_ROLE_WORKER].group = "g";
    CHECK(kiln_sched_place_rules(s, mixed, 2, &grp, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 3 && shared(&c, &p, RACK) && shared(&c, &p, BLOCK));
    release(s, &p);
    /* a level the Topology lacks: never, naming it */
    kiln_sched_rules zone = rules(KILN_ROLE_WORKER, "topology.kubernetes.io/zone", NULL);
    CHECK(kiln_sched_place_rules(s, w2x4, 2, &zone, &p, why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "topology.kubernetes.io/zone"), "%s", why);
    /* the short form of a level (a label value cannot hold '/'): rack */
    kiln_sched_rules shortf = rules(KILN_ROLE_WORKER, "topology-rack", NULL);
    CHECK(kiln_sched_place_rules(s, w2x4, 2, &shortf, &p, why, sizeof why) == KILN_OK);
    CHECK(p.n == 2 && shared(&c, &p, RACK) && shared(&c, &p, BLOCK));
    release(s, &p);
    /* without levels no request is looked at: plain placement */
    kiln_sched_rules off = rack;
    off.n_levels = 0;
    CHECK(kiln_sched_place_rules(s, w4x4, 2, &off, &p, why, sizeof why) == KILN_OK);
    release(s, &p);
    /* nothing held is left behind: every GPU free again */
    size_t free_all = 0;
    for (size_t i = 0; i < c.n; i++)
        free_all += kiln_sched_free_devices(s, i);
    CHECK(free_all == 32);
    kiln_sched_free(s);
    kiln_cluster_free(&c);
}

static size_t load_q(const char *y, kiln_queues **q, kiln_diag *d)
{
    *q = NULL;
    kiln_diag_free(d);
    *d = (kiln_diag)KILN_DIAG_INIT;
    kiln_err e = kiln_queues_load(y, strlen(y), q, d);
    return e == KILN_OK ? 0 : d->n ? d->n : 1;
}

static bool refused_at(const char *y, const char *field)
{
    kiln_queues *q = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    bool found = false;
    if (load_q(y, &q, &d))
        for (size_t i = 0; i < d.n; i++)
            found |= strstr(d.v[i].field, field) != NULL;
    if (!found) kiln_diag_print(&d, stderr);
    kiln_queues_free(q);
    kiln_diag_free(&d);
    return found;
}

#define TOPO(api, lv)                                                                              \
    "apiVersion: " api "\nkind: Topology\nmetadata: {name: default}\nspec:\n  levels:\n" lv
#define LEVELS3 "  - nodeLabel: " BLOCK "\n  - nodeLabel: " RACK "\n  - nodeLabel: " HOST "\n"
#define FLAVOR(extra)                                                                              \
    "---\nkind: ResourceFlavor\napiVersion: kueue.x-k8s.io/v1beta2\nmetadata: {name: tas}\n"       \
    "spec:\n" extra
#define CQ                                                                                         \
    "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\n"          \
    "spec:\n  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n"  \
    "    flavors:\n    - name: tas\n      resources:\n      - {name: nvidia.com/gpu, "             \
    "nominalQuota: 16}\n"

static void queues_file(void)
{
    kiln_queues *q = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    static const char good[] = TOPO("kueue.x-k8s.io/v1beta2", LEVELS3) FLAVOR(
        "  nodeLabels: {cloud.provider.com/node-group: tas-group}\n  topologyName: default\n"
        "  tolerations:\n  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n") CQ;
    CHECK(load_q(good, &q, &d) == 0);
    if (!q) kiln_diag_print(&d, stderr);
    CHECK(q && q->ntopologies == 1 && q->topologies[0].levels.n == 3 &&
          strcmp(q->topologies[0].levels.v[1], RACK) == 0 && q->flavors[0].topology == 0);
    CHECK(q && kiln_queues_topology_for(q, 0, RACK) == 0 &&
          kiln_queues_topology_for(q, 0, "hostname") == 0 &&
          kiln_queues_topology_for(q, 0, "zone") == -1);
    kiln_queues_free(q);
    /* v1beta1 and v1alpha1 (Kueue before v0.14) Topologies read the same */
    static const char old[] = TOPO("kueue.x-k8s.io/v1alpha1", LEVELS3) FLAVOR(
        "  nodeLabels: {cloud.provider.com/node-group: tas-group}\n  topologyName: default\n") CQ;
    CHECK(load_q(old, &q, &d) == 0 && q && q->flavors[0].topology == 0);
    kiln_queues_free(q);
    kiln_diag_free(&d);

    /* a ClusterQueue declared a Vertex persistent resource by kiln's label;
     * other labels, and an id Vertex would not take, refused */
    static const char pr[] =
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: cq\n"
        "  labels: {kiln.dev/persistent-resource: team-a100s}\nspec: {namespaceSelector: {}}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {namespace: p, "
        "name: r}\nspec: {clusterQueue: cq}\n";
    CHECK(load_q(pr, &q, &d) == 0 && q && q->cqs[0].persistent_resource &&
          strcmp(q->cqs[0].persistent_resource, "team-a100s") == 0);
    char pw[300];
    CHECK(q && kiln_queues_persistent_lq(q, "p", "team-a100s", pw, sizeof pw) == 0);
    CHECK(q && kiln_queues_persistent_lq(q, "other", "team-a100s", pw, sizeof pw) == -1 &&
          strstr(pw, "project other has no LocalQueue for it"));
    CHECK(q && kiln_queues_persistent_lq(q, "p", "nope", pw, sizeof pw) == -1 &&
          strstr(pw, "no ClusterQueue is declared"));
    kiln_queues_free(q);
    kiln_diag_free(&d);
    CHECK(refused_at("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: "
                     "cq\n  labels: {team: a}\n",
                     "ClusterQueue cq: metadata.labels.team"));
    CHECK(refused_at("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: "
                     "cq\n  labels: {kiln.dev/persistent-resource: Team_A}\n",
                     "metadata.labels.kiln.dev/persistent-resource"));

    /* Kueue's rules, each refused at its field */
    CHECK(refused_at(
        TOPO("kueue.x-k8s.io/v1beta2", "  - nodeLabel: " HOST "\n  - nodeLabel: " RACK "\n"),
        "spec.levels[0].nodeLabel"));
    CHECK(refused_at(
        TOPO("kueue.x-k8s.io/v1beta2", "  - nodeLabel: " RACK "\n  - nodeLabel: " RACK "\n"),
        "spec.levels[1].nodeLabel"));
    CHECK(refused_at(TOPO("kueue.x-k8s.io/v1beta2", "  - nodeLabel: 'bad key!'\n"),
                     "spec.levels[0].nodeLabel"));
    CHECK(refused_at("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: t}\n"
                     "spec: {levels: []}\n",
                     "spec.levels"));
    CHECK(refused_at(TOPO("kueue.x-k8s.io/v1beta2", "  - {nodeLabel: " RACK ", weight: 2}\n"),
                     "spec.levels[0].weight"));
    /* a flavor naming a Topology that is not there, or without nodeLabels */
    CHECK(refused_at(FLAVOR("  nodeLabels: {a: b}\n  topologyName: nowhere\n") CQ,
                     "ResourceFlavor tas: spec.topologyName"));
    CHECK(refused_at(TOPO("kueue.x-k8s.io/v1beta2", LEVELS3) FLAVOR("  topologyName: default\n") CQ,
                     "ResourceFlavor tas: spec.topologyName"));
}

static void job_model(void)
{
    static const char y[] =
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: t\nspec:\n"
        "  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      template:\n"
        "        metadata:\n          annotations:\n"
        "            kueue.x-k8s.io/podset-preferred-topology: " BLOCK "\n"
        "        spec:\n          containers: [{name: pytorch, image: img}]\n"
        "    Worker:\n      replicas: 2\n      template:\n        metadata:\n"
        "          annotations:\n            kueue.x-k8s.io/podset-required-topology: " RACK "\n"
        "            kueue.x-k8s.io/podset-group-name: all\n"
        "        spec:\n          containers: [{name: pytorch, image: img}]\n";
    kiln_job *job = NULL, *back = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_job_from_kubeflow(y, strlen(y), &job, &d) == KILN_OK && job);
    if (!job) {
        kiln_diag_print(&d, stderr);
        kiln_diag_free(&d);
        return;
    }
    kiln_topology_request t;
    CHECK(kiln_job_topology(job, KILN_ROLE_WORKER, &t) && t.required &&
          strcmp(t.required, RACK) == 0 && t.group && strcmp(t.group, "all") == 0);
    CHECK(kiln_job_topology(job, KILN_ROLE_MASTER, &t) && t.preferred &&
          strcmp(t.preferred, BLOCK) == 0 && !t.required && !t.group);
    char *js = kiln_job_to_json(job, KILN_ENC_COMPACT);
    CHECK(js && strstr(js, "\"topology\""));
    CHECK(js && kiln_job_from_json(js, strlen(js), &back, &d) == KILN_OK && back);
    CHECK(back && kiln_job_equal(job, back));
    kiln_sched_rules ru;
    kiln_sched_rules_of(job, &ru);
    CHECK(ru.has_topo[KILN_ROLE_WORKER] && ru.has_topo[KILN_ROLE_MASTER] &&
          !ru.has_topo[KILN_ROLE_PARAMETER_SERVER]);
    free(js);
    kiln_job_free(back);
    kiln_job_free(job);
    job = NULL;

    /* two requests on one template, a slice, a bad value: refused, named */
    static const char *const bad[] = {
        "kueue.x-k8s.io/podset-required-topology: " RACK
        "\n            kueue.x-k8s.io/podset-preferred-topology: " BLOCK,
        "kueue.x-k8s.io/podset-slice-required-topology: " RACK
        "\n            kueue.x-k8s.io/podset-slice-size: '2'",
        "kueue.x-k8s.io/podset-unconstrained-topology: 'maybe'",
        "kueue.x-k8s.io/podset-group-name: g",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char b[2048];
        snprintf(b, sizeof b,
                 "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: t\nspec:\n"
                 "  tfReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n"
                 "        metadata:\n          annotations:\n            %s\n"
                 "        spec:\n          containers: [{name: tensorflow, image: img}]\n",
                 bad[i]);
        kiln_diag_free(&d);
        d = (kiln_diag)KILN_DIAG_INIT;
        CHECK_MSG(kiln_job_from_kubeflow(b, strlen(b), &job, &d) != KILN_OK, "case %zu", i);
        bool named = false;
        for (size_t k = 0; k < d.n; k++)
            named |= strstr(d.v[k].field, "annotations") != NULL;
        CHECK_MSG(named, "case %zu", i);
        kiln_job_free(job);
        job = NULL;
    }
    kiln_diag_free(&d);

    /* ml v1 and Vertex jobs: labels, one group for the whole job */
    static const char mlv1[] =
        "{\"jobId\": \"j\", \"labels\": {\"kiln-required-topology\": \"topology-rack\"},"
        " \"trainingInput\": {\"scaleTier\": \"CUSTOM\", \"masterType\": \"n1-standard-8\","
        " \"workerType\": \"n1-standard-8\", \"workerCount\": \"2\", \"region\": \"r\"}}";
    CHECK(kiln_job_from_json(mlv1, strlen(mlv1), &job, &d) == KILN_OK && job);
    CHECK(job && kiln_job_topology(job, KILN_ROLE_MASTER, &t) && t.required &&
          strcmp(t.required, "topology-rack") == 0 && t.group);
    kiln_topology_request t2;
    CHECK(job && kiln_job_topology(job, KILN_ROLE_WORKER, &t2) && t2.group &&
          strcmp(t.group, t2.group) == 0);
    CHECK(job && !kiln_job_topology(job, KILN_ROLE_PARAMETER_SERVER, &t2));
    kiln_job_free(job);
    kiln_diag_free(&d);
}

int main(void)
{
    placement();
    queues_file();
    job_model();
    TEST_DONE();
}

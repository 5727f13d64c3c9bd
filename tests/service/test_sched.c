/* tests/service/test_sched.c - gang placement with exclusive devices on a
 * simulated cluster (node config), never-fits reasons, hard resources, and
 * the plans the catalog makes for real jobs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/sched.h"
#include "plan_fixture.h"
#include "test.h"

static const char cluster_json[] =
    "{\"nodes\": ["
    " {\"name\": \"a\", \"labels\": {\"zone\": \"z1\"},"
    "  \"accelerators\": [{\"type\": \"NVIDIA_TESLA_V100\", \"count\": 4}]},"
    " {\"name\": \"b\", \"accelerators\": [{\"type\": \"NVIDIA_TESLA_V100\", \"count\": 4},"
    "                                     {\"type\": \"NVIDIA_TESLA_T4\", \"count\": 2}]},"
    " {\"name\": \"c\", \"cpus\": 4, \"memoryGb\": 16, \"hardResources\": true}"
    "]}";

/* Every device of the cluster is held by at most one replica of `pls`. */
static bool exclusive(const kiln_cluster *c, kiln_placement *pls, size_t n)
{
    int owner[8][64];
    memset(owner, 0, sizeof owner);
    for (size_t p = 0; p < n; p++)
        for (size_t i = 0; i < pls[p].n; i++)
            for (int k = 0; k < pls[p].slots[i].n_devs; k++) {
                int *o = &owner[pls[p].slots[i].node][pls[p].slots[i].devs[k]];
                if (*o) return false;
                *o = 1;
            }
    (void)c;
    return true;
}

/* The best fit by a plain scan of every node and device: fewest free devices
 * of the type to spare, then the lowest index; -1 when none fits. */
static long reference_fit(const kiln_cluster *c, const kiln_sched *s, const char *type, int k)
{
    long best = -1;
    int best_spare = 1 << 30;
    for (size_t i = 0; i < c->n; i++) {
        if (kiln_sched_cordoned(s, i)) continue;
        int avail = 0;
        for (size_t j = 0; j < c->nodes[i].n_devs; j++)
            avail +=
                !kiln_sched_device_busy(s, i, j) && strcmp(c->nodes[i].devs[j].type, type) == 0;
        if (avail >= k && avail - k < best_spare) best = (long)i, best_spare = avail - k;
    }
    return best;
}

/* The indexed search (free counts and bitsets per type) places exactly where
 * a scan would, through random places, releases and cordons on 150 nodes of
 * mixed types (more than 64: the bitsets span words). */
static void index_matches_scan(void)
{
    static const char *types[3] = {"NVIDIA_TESLA_V100", "NVIDIA_TESLA_T4", "NVIDIA_TESLA_P100"};
    char json[64 * 1024], why[256];
    size_t o = 0;
    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    srand(11);
    o += (size_t)snprintf(json + o, sizeof json - o, "{\"nodes\": [");
    for (int i = 0; i < 150; i++)
        o += (size_t)snprintf(json + o, sizeof json - o,
                              "%s{\"name\": \"n%d\", \"accelerators\": [{\"type\": \"%s\", "
                              "\"count\": %d}, {\"type\": \"%s\", \"count\": %d}]}",
                              i ? "," : "", i, types[i % 3], 1 + rand() % 8, types[(i + 1) % 3],
                              1 + rand() % 4);
    o += (size_t)snprintf(json + o, sizeof json - o, "]}");
    CHECK(kiln_cluster_from_json(json, o, &c, &d) == KILN_OK);
    kiln_sched *s = kiln_sched_new(&c);
    kiln_placement held[64] = {0};
    int wrong = 0, placed = 0;
    for (int step = 0; step < 3000; step++) {
        int h = rand() % 64;
        if (held[h].n) { /* give something back now and then */
            kiln_sched_release(s, &held[h]);
            kiln_placement_free(&held[h]);
        }
        if (rand() % 10 == 0) kiln_sched_set_cordon(s, (size_t)(rand() % 150), rand() % 2);
        const char *type = types[rand() % 3];
        int k = 1 + rand() % 6;
        kiln_replica_plan p[1] = {plan(KILN_ROLE_MASTER, 1, type, k)};
        long want = reference_fit(&c, s, type, k);
        kiln_err err = kiln_sched_place(s, p, 1, &held[h], why, sizeof why);
        if (err == KILN_OK) placed++;
        wrong += err == KILN_OK ? (long)held[h].slots[0].node != want : want >= 0;
    }
    CHECK_MSG(wrong == 0 && placed > 100, "%d of 3000 placements differ from a scan (%d placed)",
              wrong, placed);
    for (int h = 0; h < 64; h++)
        kiln_placement_free(&held[h]);
    kiln_sched_free(s);
    kiln_cluster_free(&c);
    kiln_diag_free(&d);
}

/* GPUs out of service (the watch's failures) and refused at discovery
 * (MIG), and requests for any one model (nvidia.com/gpu). */
static void health_and_any_model(void)
{
    static const char json[] =
        "{\"nodes\": ["
        " {\"name\": \"h\", \"accelerators\": [{\"type\": \"NVIDIA_H100_80GB\", \"count\": 2}]},"
        " {\"name\": \"l\", \"accelerators\": [{\"type\": \"NVIDIA_L4\", \"count\": 2}]}]}";
    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    char why[512];
    kiln_placement pl[3] = {0};
    CHECK(kiln_cluster_from_json(json, strlen(json), &c, &d) == KILN_OK);
    /* L4 1 in MIG mode (as discovery marks it) */
    c.nodes[1].devs[1].refused = strdup("MIG mode is enabled: ...");
    kiln_sched *s = kiln_sched_new(&c);
    CHECK(kiln_sched_free_devices(s, 1) == 1 && !kiln_sched_device_free(s, 1, 1));

    /* any one model: 1 GPU goes where the fewest are left over (the one L4) */
    kiln_replica_plan any1[1] = {plan(KILN_ROLE_MASTER, 1, KILN_ACCEL_ANY_GPU, 1)};
    CHECK(kiln_sched_place(s, any1, 1, &pl[0], why, sizeof why) == KILN_OK);
    CHECK(pl[0].n == 1 && pl[0].slots[0].node == 1 && pl[0].slots[0].devs[0] == 0);
    /* 2 of one model: the H100s, never an L4 with an H100 */
    kiln_replica_plan any2[1] = {plan(KILN_ROLE_MASTER, 1, KILN_ACCEL_ANY_GPU, 2)};
    CHECK(kiln_sched_place(s, any2, 1, &pl[1], why, sizeof why) == KILN_OK);
    CHECK(pl[1].slots[0].node == 0 && pl[1].slots[0].n_devs == 2);
    /* 3 of one model: no node has them (the refused L4 does not count) */
    kiln_replica_plan any3[1] = {plan(KILN_ROLE_MASTER, 1, KILN_ACCEL_ANY_GPU, 3)};
    CHECK(kiln_sched_place(s, any3, 1, &pl[2], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "3 GPUs of one model") && strstr(why, "most any node has is 2"), "%s",
              why);
    /* 2 L4s: one is refused for good, so never */
    kiln_replica_plan l4x2[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_L4", 2)};
    CHECK(kiln_sched_place(s, l4x2, 1, &pl[2], why, sizeof why) == KILN_EINVAL);
    kiln_sched_release(s, &pl[0]);
    kiln_placement_free(&pl[0]);
    kiln_sched_release(s, &pl[1]);
    kiln_placement_free(&pl[1]);

    /* a failed H100: out of the free devices at once, while held or not;
     * a job that only it would fit waits (it may come back) */
    kiln_sched_set_device_failed(s, 0, 1, true);
    CHECK(kiln_sched_device_failed(s, 0, 1) && kiln_sched_free_devices(s, 0) == 1);
    kiln_replica_plan h2[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_H100_80GB", 2)};
    CHECK(kiln_sched_place(s, h2, 1, &pl[0], why, sizeof why) == KILN_ECONFLICT);
    kiln_replica_plan h1[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_H100_80GB", 1)};
    CHECK(kiln_sched_place(s, h1, 1, &pl[1], why, sizeof why) == KILN_OK);
    CHECK(pl[1].slots[0].devs[0] == 0);
    /* fails while held: released, it stays out; back in service: free */
    kiln_sched_set_device_failed(s, 0, 0, true);
    kiln_sched_release(s, &pl[1]);
    kiln_placement_free(&pl[1]);
    CHECK(kiln_sched_free_devices(s, 0) == 0 && !kiln_sched_device_busy(s, 0, 0));
    kiln_sched_set_device_failed(s, 0, 0, false);
    kiln_sched_set_device_failed(s, 0, 1, false);
    CHECK(kiln_sched_free_devices(s, 0) == 2);
    CHECK(kiln_sched_place(s, h2, 1, &pl[0], why, sizeof why) == KILN_OK);
    kiln_sched_release(s, &pl[0]);
    kiln_placement_free(&pl[0]);
    kiln_sched_free(s);
    kiln_cluster_free(&c);
    kiln_diag_free(&d);
}

/* A node config's `address`: resolved once, when the config is read, to
 * the address replicas are given; one that does not resolve refuses the
 * config, naming the field. */
static void node_addresses(void)
{
    const char *ok = "{\"nodes\": [{\"name\": \"a\", \"address\": \"localhost\"},"
                     " {\"name\": \"b\", \"address\": \"10.1.2.3\"}, {\"name\": \"c\"}]}";
    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_cluster_from_json(ok, strlen(ok), &c, &d) == KILN_OK && d.n == 0);
    CHECK(c.n == 3 && strcmp(c.nodes[0].name, "a") == 0);
    CHECK_MSG(c.n == 3 && strcmp(c.nodes[0].address, "127.0.0.1") == 0 &&
                  strcmp(c.nodes[1].address, "10.1.2.3") == 0 &&
                  strcmp(c.nodes[2].address, "127.0.0.1") == 0,
              "addresses %s %s", c.n ? c.nodes[0].address : "", c.n > 1 ? c.nodes[1].address : "");
    kiln_cluster_free(&c);
    const char *bad = "{\"nodes\": [{\"name\": \"a\", \"address\": \"no-such-node.invalid\"}]}";
    CHECK(kiln_cluster_from_json(bad, strlen(bad), &c, &d) != KILN_OK);
    CHECK_MSG(d.n == 1 && strcmp(d.v[0].field, "nodes[0].address") == 0 &&
                  strstr(d.v[0].description, "'no-such-node.invalid' does not resolve"),
              "%s", d.n ? d.v[0].description : "no diagnostic");
    kiln_cluster_free(&c);
    kiln_diag_free(&d);
    /* RFC 6761's loopback names, whatever the resolver knows of them (no
     * resolver knows "node-b.localhost"; a chroot without /etc/hosts not
     * even "localhost") */
    char addr[64] = "", why[256] = "";
    CHECK(kiln_node_resolve("node-b.localhost", addr, sizeof addr, why, sizeof why));
    CHECK_MSG(strcmp(addr, "127.0.0.1") == 0, "%s", addr);
    CHECK(!kiln_node_resolve("localhost.invalid", addr, sizeof addr, why, sizeof why));
}

/* MIG instances (as discovery lists them: NVIDIA_MIG_<profile> devices of
 * their own after the whole GPUs): asked for by kiln's type or the device
 * plugin's name alike; never what a count without a model gets. */
static void mig_instances(void)
{
    static const char json[] =
        "{\"nodes\": ["
        " {\"name\": \"m\", \"accelerators\": [{\"type\": \"NVIDIA_H100_80GB\", \"count\": 1},"
        "   {\"type\": \"NVIDIA_MIG_1G_10GB\", \"count\": 2},"
        "   {\"type\": \"NVIDIA_MIG_1G_10GB_ME\", \"count\": 1}]}]}";
    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    char why[512], tb[96];
    kiln_placement pl[4] = {0};
    CHECK(kiln_cluster_from_json(json, strlen(json), &c, &d) == KILN_OK);
    c.nodes[0].devs[0].refused = strdup("MIG mode is enabled: ...");
    kiln_sched *s = kiln_sched_new(&c);
    /* names */
    CHECK(strcmp(kiln_devices_mig_type("1g.10gb+me", tb, sizeof tb), "NVIDIA_MIG_1G_10GB_ME") == 0);
    CHECK(strcmp(kiln_devices_mig_type("1c.3g.40gb", tb, sizeof tb), "NVIDIA_MIG_1C_3G_40GB") == 0);
    CHECK(strcmp(kiln_devices_mig_resource("1g.10gb+me", tb, sizeof tb),
                 "nvidia.com/mig-1g.10gb.me") == 0);
    CHECK(strcmp(kiln_devices_canonical_type("nvidia.com/mig-1g.10gb.me", tb, sizeof tb),
                 "NVIDIA_MIG_1G_10GB_ME") == 0);
    CHECK(kiln_devices_canonical_type("nvidia.com/gpu", tb, sizeof tb) == NULL);
    CHECK(kiln_devices_canonical_type("nvidia.com/mig-", tb, sizeof tb) == NULL);
    CHECK(kiln_devices_canonical_type("nvidia.com/mig-1g/x", tb, sizeof tb) == NULL);
    CHECK(kiln_devices_canonical_type("NVIDIA_MIG_1G_10GB", tb, sizeof tb) == NULL);

    /* a count without a model: whole GPUs only, and the one H100 is MIG */
    kiln_replica_plan any1[1] = {plan(KILN_ROLE_MASTER, 1, KILN_ACCEL_ANY_GPU, 1)};
    CHECK(kiln_sched_place(s, any1, 1, &pl[0], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "has a GPU it may hand out"), "%s", why);
    /* by kiln's type, then by the device plugin's name: the two 1g.10gb */
    kiln_replica_plan a[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_MIG_1G_10GB", 1)};
    kiln_replica_plan b[1] = {plan(KILN_ROLE_MASTER, 1, "nvidia.com/mig-1g.10gb", 1)};
    CHECK(kiln_sched_place(s, a, 1, &pl[0], why, sizeof why) == KILN_OK);
    CHECK(kiln_sched_place(s, b, 1, &pl[1], why, sizeof why) == KILN_OK);
    CHECK(pl[0].slots[0].devs[0] == 1 && pl[1].slots[0].devs[0] == 2);
    /* a third waits (not never): the +me instance is another profile */
    CHECK(kiln_sched_place(s, b, 1, &pl[2], why, sizeof why) == KILN_ECONFLICT);
    kiln_replica_plan me[1] = {plan(KILN_ROLE_MASTER, 1, "nvidia.com/mig-1g.10gb.me", 1)};
    CHECK(kiln_sched_place(s, me, 1, &pl[2], why, sizeof why) == KILN_OK);
    CHECK(pl[2].slots[0].devs[0] == 3);
    /* two instances for one replica: never, there are two of them in all
     * but both are held... after release the job fits */
    kiln_replica_plan two[1] = {plan(KILN_ROLE_MASTER, 1, "nvidia.com/mig-1g.10gb", 2)};
    CHECK(kiln_sched_place(s, two, 1, &pl[3], why, sizeof why) == KILN_ECONFLICT);
    kiln_replica_plan three[1] = {plan(KILN_ROLE_MASTER, 1, "nvidia.com/mig-1g.10gb", 3)};
    CHECK(kiln_sched_place(s, three, 1, &pl[3], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "NVIDIA_MIG_1G_10GB") && strstr(why, "most any node has is 2"), "%s",
              why);
    for (int i = 0; i < 3; i++) {
        kiln_sched_release(s, &pl[i]);
        kiln_placement_free(&pl[i]);
    }
    CHECK(kiln_sched_place(s, two, 1, &pl[0], why, sizeof why) == KILN_OK);
    kiln_sched_release(s, &pl[0]);
    kiln_placement_free(&pl[0]);
    kiln_sched_free(s);
    kiln_cluster_free(&c);
    kiln_diag_free(&d);
}

/* ---------- topology: the best-connected free set ---------- */

typedef kiln_gpu_link (*layout_fn)(int a, int b);

/* One node of n GPUs whose links follow `f`. */
static void topo_node(kiln_cluster *c, kiln_diag *d, int n, layout_fn f)
{
    char json[256];
    snprintf(json, sizeof json,
             "{\"nodes\": [{\"name\": \"t\", \"accelerators\": [{\"type\": \"NVIDIA_H100_80GB\","
             " \"count\": %d}]}]}",
             n);
    CHECK(kiln_cluster_from_json(json, strlen(json), c, d) == KILN_OK);
    for (int i = 0; i < n; i++) {
        c->nodes[0].devs[i].links = calloc((size_t)n, sizeof(kiln_gpu_link));
        for (int j = 0; j < n; j++)
            c->nodes[0].devs[i].links[j] = i == j ? (kiln_gpu_link){0, 0} : f(i, j);
    }
}

/* DGX-1-like: two islands of 4 GPUs, NVLinked within, SYS across */
static kiln_gpu_link islands4(int a, int b)
{
    return a / 4 == b / 4 ? (kiln_gpu_link){2, KILN_TOPO_HOSTBRIDGE}
                          : (kiln_gpu_link){0, KILN_TOPO_SYSTEM};
}
/* PCIe only: pairs on a switch (PIX), fours under one (PXB), SYS across */
static kiln_gpu_link pcie8(int a, int b)
{
    return (kiln_gpu_link){0, a / 2 == b / 2   ? KILN_TOPO_SINGLE
                              : a / 4 == b / 4 ? KILN_TOPO_MULTIPLE
                                               : KILN_TOPO_SYSTEM};
}
/* HGX: every pair NV18 through NVSwitches */
static kiln_gpu_link hgx(int a, int b)
{
    (void)a, (void)b;
    return (kiln_gpu_link){18, KILN_TOPO_NODE};
}
/* 32 GPUs, islands of 8 (the greedy search: C(32, 8) is too many sets) */
static kiln_gpu_link islands8(int a, int b)
{
    return a / 8 == b / 8 ? (kiln_gpu_link){12, KILN_TOPO_NODE}
                          : (kiln_gpu_link){0, KILN_TOPO_SYSTEM};
}

/* Holds devices `busy` of node 0 as a placement of one slot. */
static void hold_devs(kiln_sched *s, kiln_placement *p, const int *busy, int n)
{
    p->slots = calloc(1, sizeof *p->slots);
    p->n = 1;
    p->slots[0].n_devs = n;
    memcpy(p->slots[0].devs, busy, (size_t)n * sizeof *busy);
    kiln_sched_claim(s, p);
}

/* Places one replica of `want` GPUs; its devices into got. */
static bool place_n(kiln_sched *s, int want, kiln_placement *p, int *got)
{
    char why[256];
    kiln_replica_plan r[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_H100_80GB", want)};
    if (kiln_sched_place(s, r, 1, p, why, sizeof why) != KILN_OK) return false;
    memcpy(got, p->slots[0].devs, (size_t)want * sizeof *got);
    return true;
}

static void topology_choice(void)
{
    static const struct {
        const char *name;
        int n;
        layout_fn f;
        int busy[4], n_busy, want, expect[8];
    } cases[] = {
        /* first-free would take 2,3,4 (across islands): one island instead */
        {"islands of 4", 8, islands4, {0, 1}, 2, 3, {4, 5, 6}},
        /* first-free 2,3 would span... the island pair 2,3 is as good: kept */
        {"islands of 4, two", 8, islands4, {0, 1}, 2, 2, {2, 3}},
        /* PCIe: 1 and 3 share only a PXB; 4 and 5 one switch */
        {"pcie pairs", 8, pcie8, {0, 2}, 2, 2, {4, 5}},
        /* four: the PXB quad 4-7 beats anything spanning SYS */
        {"pcie quad", 8, pcie8, {1}, 1, 4, {4, 5, 6, 7}},
        /* all alike: the lowest free GPUs, as without topology */
        {"hgx", 8, hgx, {1}, 1, 4, {0, 2, 3, 4}},
        /* greedy: 8 of 31 free; the whole second island */
        {"islands of 8 (greedy)", 32, islands8, {0}, 1, 8, {8, 9, 10, 11, 12, 13, 14, 15}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        kiln_cluster c;
        kiln_diag d = KILN_DIAG_INIT;
        kiln_placement held = {0}, p = {0};
        int got[8] = {0};
        topo_node(&c, &d, cases[k].n, cases[k].f);
        kiln_sched *s = kiln_sched_new(&c);
        hold_devs(s, &held, cases[k].busy, cases[k].n_busy);
        CHECK_MSG(place_n(s, cases[k].want, &p, got), "%s: not placed", cases[k].name);
        CHECK_MSG(memcmp(got, cases[k].expect, (size_t)cases[k].want * sizeof(int)) == 0,
                  "%s: got %d %d %d %d ...", cases[k].name, got[0], got[1], got[2], got[3]);
        kiln_sched_release(s, &p);
        kiln_placement_free(&p);
        kiln_sched_release(s, &held);
        kiln_placement_free(&held);
        kiln_sched_free(s);
        kiln_cluster_free(&c);
        kiln_diag_free(&d);
    }
    /* the matrix's words, as nvidia-smi topo -m prints them */
    char b[16];
    CHECK_STR(kiln_devices_link_name(&(kiln_gpu_link){18, 40}, b, sizeof b), "NV18");
    CHECK_STR(kiln_devices_link_name(&(kiln_gpu_link){0, KILN_TOPO_SINGLE}, b, sizeof b), "PIX");
    CHECK_STR(kiln_devices_link_name(&(kiln_gpu_link){0, KILN_TOPO_MULTIPLE}, b, sizeof b), "PXB");
    CHECK_STR(kiln_devices_link_name(&(kiln_gpu_link){0, KILN_TOPO_HOSTBRIDGE}, b, sizeof b),
              "PHB");
    CHECK_STR(kiln_devices_link_name(&(kiln_gpu_link){0, KILN_TOPO_NODE}, b, sizeof b), "NODE");
    CHECK_STR(kiln_devices_link_name(&(kiln_gpu_link){0, KILN_TOPO_SYSTEM}, b, sizeof b), "SYS");
    CHECK_STR(kiln_devices_link_name(&(kiln_gpu_link){0, -1}, b, sizeof b), "N/A");
    CHECK(kiln_devices_link_cost(&(kiln_gpu_link){1, 50}) <
          kiln_devices_link_cost(&(kiln_gpu_link){0, 10}));
    CHECK(kiln_devices_link_cost(&(kiln_gpu_link){18, 50}) <
          kiln_devices_link_cost(&(kiln_gpu_link){2, 50}));
}

int main(void)
{
    node_addresses();
    index_matches_scan();
    health_and_any_model();
    mig_instances();
    topology_choice();

    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    char why[512];

    CHECK(kiln_cluster_from_json(cluster_json, strlen(cluster_json), &c, &d) == KILN_OK);
    CHECK(c.n == 3 && c.nodes[0].n_devs == 4 && c.nodes[1].n_devs == 6 && c.nodes[2].n_devs == 0);
    CHECK(c.nodes[1].devs[5].simulated && strstr(c.nodes[1].devs[5].uuid, "SIMULATED"));
    CHECK(c.nodes[2].hard_resources && c.nodes[2].cpus == 4);
    kiln_sched *s = kiln_sched_new(&c);
    CHECK(s != NULL);

    /* master 1xV100 + 2 workers x 4 V100: needs both GPU nodes, all or none */
    kiln_replica_plan job1[2] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_TESLA_V100", 2),
                                 plan(KILN_ROLE_WORKER, 2, "NVIDIA_TESLA_V100", 3)};
    kiln_placement pl[4] = {0};
    /* 2 + 3 + 3 = 8 V100 = the cluster's 8, but 3+3+2 do not pack onto 4+4: never */
    CHECK(kiln_sched_place(s, job1, 2, &pl[0], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "do not fit beside") && strstr(why, "NVIDIA_TESLA_V100"), "%s", why);
    CHECK(pl[0].n == 0 && kiln_sched_free_devices(s, 0) == 4);

    kiln_replica_plan job2[2] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_TESLA_V100", 2),
                                 plan(KILN_ROLE_WORKER, 3, "NVIDIA_TESLA_V100", 2)};
    CHECK(kiln_sched_place(s, job2, 2, &pl[0], why, sizeof why) == KILN_OK);
    CHECK(pl[0].n == 4);
    CHECK(pl[0].slots[0].role == KILN_ROLE_MASTER && pl[0].slots[1].role == KILN_ROLE_WORKER &&
          pl[0].slots[1].index == 0 && pl[0].slots[3].index == 2);
    for (size_t i = 0; i < pl[0].n; i++)
        CHECK(pl[0].slots[i].n_devs == 2 && pl[0].slots[i].node < 2);
    CHECK(kiln_sched_free_devices(s, 0) == 0 && kiln_sched_free_devices(s, 1) == 2);

    /* every V100 is taken: a 1-V100 job waits (not never-fits); a T4 job fits */
    kiln_replica_plan small[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_TESLA_V100", 1)};
    CHECK(kiln_sched_place(s, small, 1, &pl[1], why, sizeof why) == KILN_ECONFLICT);
    CHECK(pl[1].n == 0);
    kiln_replica_plan t4[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_TESLA_T4", 2)};
    CHECK(kiln_sched_place(s, t4, 1, &pl[1], why, sizeof why) == KILN_OK);
    CHECK(pl[1].n == 1 && pl[1].slots[0].node == 1);
    CHECK(exclusive(&c, pl, 2));

    /* gang: 2 workers x 2 T4 when none is free -> nothing is taken at all */
    size_t free_b = kiln_sched_free_devices(s, 1);
    kiln_replica_plan cpu_and_gpu[2] = {plan(KILN_ROLE_MASTER, 1, NULL, 0),
                                        plan(KILN_ROLE_WORKER, 2, "NVIDIA_TESLA_T4", 1)};
    CHECK(kiln_sched_place(s, cpu_and_gpu, 2, &pl[2], why, sizeof why) == KILN_ECONFLICT);
    CHECK(kiln_sched_free_devices(s, 1) == free_b);

    /* release: the waiting job now fits, on exactly the freed devices */
    kiln_sched_release(s, &pl[0]);
    kiln_placement_free(&pl[0]);
    CHECK(kiln_sched_place(s, small, 1, &pl[0], why, sizeof why) == KILN_OK);
    CHECK(exclusive(&c, pl, 2));

    /* never fits: type absent, too many per node, too many in all */
    kiln_replica_plan a100[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_TESLA_A100", 1)};
    CHECK(kiln_sched_place(s, a100, 1, &pl[2], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "NVIDIA_TESLA_A100") != NULL, "%s", why);
    kiln_replica_plan eight[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_TESLA_V100", 8)};
    CHECK(kiln_sched_place(s, eight, 1, &pl[2], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "8 x NVIDIA_TESLA_V100") && strstr(why, "most any node has is 4"), "%s",
              why);
    kiln_replica_plan many[1] = {plan(KILN_ROLE_WORKER, 3, "NVIDIA_TESLA_V100", 3)};
    CHECK(kiln_sched_place(s, many, 1, &pl[2], why, sizeof why) == KILN_EINVAL);

    /* cordon: the node takes nothing new, but a job that fits elsewhere later is only waiting */
    kiln_sched_set_cordon(s, 1, true);
    CHECK(kiln_sched_place(s, t4, 1, &pl[2], why, sizeof why) == KILN_ECONFLICT);
    kiln_sched_set_cordon(s, 1, false);

    /* nodeSelector: explicit labels and the implicit ones */
    CHECK_STR(kiln_map_get(&c.nodes[0].labels, "zone"), "z1");
    CHECK_STR(kiln_map_get(&c.nodes[0].labels, "cloud.google.com/gke-accelerator"),
              "nvidia-tesla-v100");
    CHECK(kiln_map_get(&c.nodes[1].labels, "cloud.google.com/gke-accelerator") == NULL);
    CHECK_STR(kiln_map_get(&c.nodes[1].labels, "kubernetes.io/hostname"), "b");
    {
        kiln_map zone = {0}, host_c = {0}, nowhere = {0};
        kiln_map_set(&zone, "zone", "z1");
        kiln_map_set(&host_c, "kiln.dev/node", "c");
        kiln_map_set(&nowhere, "zone", "mars");
        const kiln_map *sel[KILN_ROLE_COUNT] = {&zone, &host_c, NULL, NULL};
        kiln_replica_plan mixed[2] = {plan(KILN_ROLE_MASTER, 1, NULL, 0),
                                      plan(KILN_ROLE_WORKER, 1, NULL, 0)};
        mixed[1].vcpus = 2, mixed[1].memory_gb = 4; /* fits node c's hard 4 CPUs */
        kiln_placement sp = {0};
        CHECK(kiln_sched_place_sel(s, mixed, 2, sel, &sp, why, sizeof why) == KILN_OK);
        CHECK(sp.n == 2 && sp.slots[0].node == 0 && sp.slots[1].node == 2);
        kiln_sched_release(s, &sp);
        kiln_placement_free(&sp);
        const kiln_map *sel2[KILN_ROLE_COUNT] = {&nowhere, NULL, NULL, NULL};
        CHECK(kiln_sched_place_sel(s, mixed, 2, sel2, &sp, why, sizeof why) == KILN_EINVAL);
        CHECK_MSG(strstr(why, "nodeSelector") && strstr(why, "zone=mars"), "%s", why);
        kiln_map_clear(&zone);
        kiln_map_clear(&host_c);
        kiln_map_clear(&nowhere);
    }

    /* CPU-only replicas: soft resources on nodes a/b take any number */
    kiln_replica_plan cpu[3] = {plan(KILN_ROLE_MASTER, 1, NULL, 0),
                                plan(KILN_ROLE_WORKER, 8, NULL, 0),
                                plan(KILN_ROLE_PARAMETER_SERVER, 3, NULL, 0)};
    CHECK(kiln_sched_place(s, cpu, 3, &pl[2], why, sizeof why) == KILN_OK && pl[2].n == 12);
    for (size_t i = 0; i < pl[2].n; i++)
        CHECK(pl[2].slots[i].n_devs == 0);
    kiln_sched_release(s, &pl[2]);
    kiln_placement_free(&pl[2]);

    for (int i = 0; i < 4; i++)
        kiln_placement_free(&pl[i]);
    kiln_sched_free(s);
    kiln_cluster_free(&c);

    /* hard resources: one node of 4 CPUs cannot take an 8-vCPU replica, ever */
    static const char hard[] =
        "{\"nodes\":[{\"name\":\"h\",\"cpus\":4,\"memoryGb\":16,\"hardResources\":true}]}";
    CHECK(kiln_cluster_from_json(hard, strlen(hard), &c, &d) == KILN_OK);
    s = kiln_sched_new(&c);
    kiln_replica_plan big[1] = {plan(KILN_ROLE_MASTER, 1, NULL, 0)};
    CHECK(kiln_sched_place(s, big, 1, &pl[0], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "hard") != NULL, "%s", why);
    kiln_sched_free(s);
    kiln_cluster_free(&c);

    /* bad node configs are reported with their field */
    static const char *bad[] = {
        "{\"nodes\": []}",
        "{\"nodes\": [{\"name\": \"\"}]}",
        "{\"nodes\": [{\"name\": \"x\", \"accelerators\": [{\"type\": \"T\", \"count\": 0}]}]}",
        "{\"nodes\": [{\"name\": \"x\"}, {\"name\": \"x\"}]}",
        "not json",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kiln_diag_clear(&d);
        CHECK_MSG(kiln_cluster_from_json(bad[i], strlen(bad[i]), &c, &d) == KILN_EINVAL &&
                      d.n > 0 && c.n == 0,
                  "%s", bad[i]);
    }
    kiln_diag_free(&d);

    /* NVML names -> catalog types (every mapped model: test_gpu_names) */
    char b[64];
    CHECK_STR(kiln_devices_type_of("Tesla V100-SXM2-16GB", b, sizeof b), "NVIDIA_TESLA_V100");
    CHECK_STR(kiln_devices_type_of("NVIDIA H100 80GB HBM3", b, sizeof b), "NVIDIA_H100_80GB");
    /* this machine: discovery must not fail where NVML is absent */
    kiln_device *devs = NULL;
    size_t nd = 0;
    char note[256];
    CHECK(kiln_devices_discover("/nonexistent/libnvidia-ml.so.1", &devs, &nd, note, sizeof note) ==
          KILN_OK);
    CHECK(nd == 0 && strncmp(note, "no GPUs: ", 9) == 0);
    kiln_devices_free(devs, nd);
    TEST_DONE();
}

/* tests/service/test_taints.c - taints and tolerations: Kubernetes'
 * matching and validation rules (src/spec/taints.c), node taints in the
 * node config (src/devices/devices.c), a Kubeflow pod template's
 * tolerations through the Job model and its JSON (the store's form), and
 * placement under them (kiln_sched_place_rules). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/sched.h"
#include "plan_fixture.h"
#include "test.h"

static kiln_taint taint(const char *k, const char *v, const char *e)
{
    return (kiln_taint){.key = (char *)k, .value = (char *)v, .effect = (char *)e};
}

static kiln_toleration tol(const char *k, const char *op, const char *v, const char *e)
{
    return (kiln_toleration){
        .key = (char *)k, .op = (char *)op, .value = (char *)v, .effect = (char *)e};
}

/* ToleratesTaint, case by case */
static void matching(void)
{
    kiln_taint gpu = taint("gpu", "reserved", "NoSchedule");
    kiln_taint bare = taint("gpu", NULL, "NoSchedule");
    kiln_toleration t;

    t = tol("gpu", "Equal", "reserved", "NoSchedule");
    CHECK(kiln_toleration_tolerates(&t, &gpu));
    t = tol("gpu", NULL, "reserved", NULL); /* no operator: Equal; no effect: all */
    CHECK(kiln_toleration_tolerates(&t, &gpu));
    t = tol("gpu", "Equal", "other", "NoSchedule");
    CHECK(!kiln_toleration_tolerates(&t, &gpu));
    t = tol("gpu", "Equal", NULL, NULL); /* Equal with no value: only a taint with none */
    CHECK(!kiln_toleration_tolerates(&t, &gpu) && kiln_toleration_tolerates(&t, &bare));
    t = tol("gpu", "Exists", NULL, NULL);
    CHECK(kiln_toleration_tolerates(&t, &gpu) && kiln_toleration_tolerates(&t, &bare));
    t = tol("gpu", "Exists", NULL, "NoExecute"); /* effect named: must be the taint's */
    CHECK(!kiln_toleration_tolerates(&t, &gpu));
    t = tol("other", "Exists", NULL, NULL);
    CHECK(!kiln_toleration_tolerates(&t, &gpu));
    t = tol(NULL, "Exists", NULL, NULL); /* empty key with Exists: every taint */
    kiln_taint any = taint("x", "y", "PreferNoSchedule");
    CHECK(kiln_toleration_tolerates(&t, &gpu) && kiln_toleration_tolerates(&t, &any));
    t = tol(NULL, "Exists", NULL, "NoSchedule"); /* every key, one effect */
    CHECK(kiln_toleration_tolerates(&t, &gpu) && !kiln_toleration_tolerates(&t, &any));
    t = tol("gpu", "Lt", "5", NULL); /* comparison operators: never match here */
    CHECK(!kiln_toleration_tolerates(&t, &gpu));

    /* any of a list, the extra list (a flavor's) counted too */
    kiln_toleration v[2] = {tol("a", "Exists", NULL, NULL), tol("b", "Exists", NULL, NULL)};
    kiln_toleration x = tol("gpu", "Exists", NULL, NULL);
    CHECK(!kiln_tolerations_tolerate(v, 2, NULL, 0, &gpu));
    CHECK(kiln_tolerations_tolerate(v, 2, &x, 1, &gpu));
    CHECK(kiln_tolerations_tolerate(NULL, 0, &x, 1, &gpu));

    char b[128];
    CHECK_STR(kiln_taint_str(&gpu, b, sizeof b), "gpu=reserved:NoSchedule");
    CHECK_STR(kiln_taint_str(&bare, b, sizeof b), "gpu:NoSchedule");
}

/* ValidateTolerations */
static void validation(void)
{
    char why[256];
    kiln_toleration t = tol("k", NULL, "v", NULL);
    CHECK(kiln_toleration_check(&t, why, sizeof why));
    t = tol(NULL, "Exists", NULL, NULL);
    CHECK(kiln_toleration_check(&t, why, sizeof why));
    t = tol(NULL, "Equal", "v", NULL);
    CHECK(!kiln_toleration_check(&t, why, sizeof why) && strncmp(why, "operator:", 9) == 0);
    t = tol(NULL, NULL, NULL, NULL); /* empty key, operator defaulting to Equal */
    CHECK(!kiln_toleration_check(&t, why, sizeof why) && strncmp(why, "operator:", 9) == 0);
    t = tol("k", "Exists", "v", NULL);
    CHECK(!kiln_toleration_check(&t, why, sizeof why) && strncmp(why, "value:", 6) == 0);
    t = tol("k", "Gt", "1", NULL);
    CHECK(!kiln_toleration_check(&t, why, sizeof why) && strncmp(why, "operator:", 9) == 0);
    t = tol("k", "Exists", NULL, "Sometimes");
    CHECK(!kiln_toleration_check(&t, why, sizeof why) && strncmp(why, "effect:", 7) == 0);
    t = tol("k", "Exists", NULL, "NoSchedule");
    t.has_toleration_seconds = true;
    CHECK(!kiln_toleration_check(&t, why, sizeof why) && strncmp(why, "effect:", 7) == 0);
    t.effect = "NoExecute";
    CHECK(kiln_toleration_check(&t, why, sizeof why));
    CHECK(kiln_taint_effect_valid("PreferNoSchedule") && !kiln_taint_effect_valid("Never") &&
          !kiln_taint_effect_valid(NULL));
}

/* The taint manager's rule for a replica already on a node */
static void noexecute(void)
{
    kiln_taint nodes[] = {taint("gpu", "reserved", "NoSchedule"), taint("maint", NULL, "NoExecute"),
                          taint("gpu", "bad", "NoExecute")};
    const kiln_taint *w = NULL;
    /* NoSchedule alone never evicts what runs */
    CHECK(kiln_noexecute_stay(NULL, 0, NULL, 0, nodes, 1, &w) == -1);
    /* an untolerated NoExecute taint: now, naming it */
    CHECK(kiln_noexecute_stay(NULL, 0, NULL, 0, nodes, 3, &w) == 0 && w == &nodes[1]);
    kiln_toleration v[3] = {tol("maint", "Exists", NULL, "NoExecute"),
                            tol("gpu", "Exists", NULL, NULL), tol("gpu", "Exists", NULL, NULL)};
    /* both tolerated, no tolerationSeconds: it stays */
    CHECK(kiln_noexecute_stay(v, 2, NULL, 0, nodes, 3, &w) == -1);
    /* the least tolerationSeconds of the matching tolerations decides */
    v[0].has_toleration_seconds = true, v[0].toleration_seconds = 30;
    v[1].has_toleration_seconds = true, v[1].toleration_seconds = 5;
    v[1].effect = "NoExecute";
    w = NULL;
    CHECK(kiln_noexecute_stay(v, 2, NULL, 0, nodes, 3, &w) == 5 && w == &nodes[2]);
    /* the first match per taint counts: v[1] (5 s) shadows v[2] (none) */
    CHECK(kiln_noexecute_stay(v, 3, NULL, 0, nodes + 2, 1, &w) == 5);
    /* tolerationSeconds <= 0: now */
    v[0].toleration_seconds = 0;
    CHECK(kiln_noexecute_stay(v, 2, NULL, 0, nodes, 3, &w) == 0 && w == &nodes[1]);
    /* a flavor's tolerations count after the replica's own */
    kiln_toleration fl = tol(NULL, "Exists", NULL, NULL);
    CHECK(kiln_noexecute_stay(v + 1, 1, &fl, 1, nodes, 3, &w) == 5);
    CHECK(kiln_noexecute_stay(NULL, 0, &fl, 1, nodes, 3, &w) == -1);
}

static bool bad_field(const char *json, const char *field)
{
    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    bool ok = kiln_cluster_from_json(json, strlen(json), &c, &d) == KILN_EINVAL;
    bool found = false;
    for (size_t i = 0; i < d.n; i++)
        found |= strcmp(d.v[i].field, field) == 0;
    if (!found) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    return ok && found;
}

/* nodes[].taints in the node config */
static void node_config(void)
{
    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    static const char ok[] =
        "{\"nodes\": [{\"name\": \"a\", \"taints\": [{\"key\": \"gpu\", \"value\": \"reserved\","
        " \"effect\": \"NoSchedule\"}, {\"key\": \"gpu\", \"effect\": \"NoExecute\"}]},"
        " {\"name\": \"b\"}]}";
    CHECK(kiln_cluster_from_json(ok, strlen(ok), &c, &d) == KILN_OK && d.n == 0);
    CHECK(c.nodes[0].n_taints == 2 && strcmp(c.nodes[0].taints[0].value, "reserved") == 0 &&
          c.nodes[0].taints[1].value == NULL &&
          strcmp(c.nodes[0].taints[1].effect, "NoExecute") == 0 && c.nodes[1].n_taints == 0);
    kiln_cluster_free(&c);
    kiln_diag_free(&d);
    CHECK(bad_field("{\"nodes\": [{\"name\": \"a\", \"taints\": {\"key\": \"k\"}}]}",
                    "nodes[0].taints"));
    CHECK(bad_field("{\"nodes\": [{\"name\": \"a\", \"taints\": [{\"effect\": \"NoSchedule\"}]}]}",
                    "nodes[0].taints[0].key"));
    CHECK(bad_field(
        "{\"nodes\": [{\"name\": \"a\", \"taints\": [{\"key\": \"k\", \"effect\": \"Never\"}]}]}",
        "nodes[0].taints[0].effect"));
    CHECK(bad_field("{\"nodes\": [{\"name\": \"a\", \"taints\": [{\"key\": \"k\", \"effect\": "
                    "\"NoSchedule\", \"colour\": \"red\"}]}]}",
                    "nodes[0].taints[0].colour"));
    CHECK(bad_field("{\"nodes\": [{\"name\": \"a\", \"taints\": [{\"key\": \"k\", \"value\": 1, "
                    "\"effect\": \"NoSchedule\"}]}]}",
                    "nodes[0].taints[0].value"));
    CHECK(bad_field("{\"nodes\": [{\"name\": \"a\", \"taints\": ["
                    "{\"key\": \"k\", \"value\": \"1\", \"effect\": \"NoSchedule\"},"
                    "{\"key\": \"k\", \"value\": \"2\", \"effect\": \"NoSchedule\"}]}]}",
                    "nodes[0].taints[1]"));
}

/* A TFJob's tolerations into the Job model, and through its JSON (what the
 * store keeps) unchanged */
static void job_model(void)
{
    static const char y[] = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: t\n"
                            "spec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: 2\n"
                            "      template:\n        spec:\n          tolerations:\n"
                            "          - {key: gpu, operator: Equal, value: reserved, effect: "
                            "NoSchedule}\n"
                            "          - {operator: Exists, effect: NoExecute, "
                            "tolerationSeconds: 30}\n"
                            "          containers: [{name: tensorflow, image: img}]\n";
    kiln_job *job = NULL, *back = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_job_from_kubeflow(y, strlen(y), &job, &d) == KILN_OK && job);
    if (!job) {
        kiln_diag_print(&d, stderr);
        kiln_diag_free(&d);
        return;
    }
    const kiln_replica_config *rc = kiln_job_role_config(job, KILN_ROLE_WORKER);
    CHECK(rc && rc->n_tolerations == 2);
    if (rc && rc->n_tolerations == 2) {
        CHECK_STR(rc->tolerations[0].key, "gpu");
        CHECK_STR(rc->tolerations[0].op, "Equal");
        CHECK_STR(rc->tolerations[0].value, "reserved");
        CHECK_STR(rc->tolerations[0].effect, "NoSchedule");
        CHECK(rc->tolerations[1].key == NULL && rc->tolerations[1].has_toleration_seconds &&
              rc->tolerations[1].toleration_seconds == 30);
    }
    char *js = kiln_job_to_json(job, KILN_ENC_COMPACT);
    CHECK(js && strstr(js, "\"tolerations\""));
    CHECK(js && kiln_job_from_json(js, strlen(js), &back, &d) == KILN_OK && back);
    CHECK(back && kiln_job_equal(job, back));
    kiln_job *copy = kiln_job_clone(job);
    CHECK(copy && kiln_job_equal(job, copy));
    kiln_job_free(copy);
    free(js);
    kiln_job_free(back);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* Placement: two GPU nodes, `tainted` with gpu=reserved:NoSchedule, `soft`
 * with a PreferNoSchedule taint, `plain` none. */
static void placement(void)
{
    static const char json[] =
        "{\"nodes\": ["
        " {\"name\": \"tainted\", \"taints\": [{\"key\": \"gpu\", \"value\": \"reserved\","
        "  \"effect\": \"NoSchedule\"}],"
        "  \"accelerators\": [{\"type\": \"NVIDIA_TESLA_V100\", \"count\": 4}]},"
        " {\"name\": \"soft\", \"taints\": [{\"key\": \"spare\", \"effect\": "
        "\"PreferNoSchedule\"}],"
        "  \"accelerators\": [{\"type\": \"NVIDIA_TESLA_V100\", \"count\": 1}]},"
        " {\"name\": \"plain\", \"accelerators\": [{\"type\": \"NVIDIA_TESLA_V100\", \"count\": "
        "2}]}"
        "]}";
    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    char why[512];
    CHECK(kiln_cluster_from_json(json, strlen(json), &c, &d) == KILN_OK);
    kiln_sched *s = kiln_sched_new(&c);
    kiln_placement p[4] = {{0}};
    kiln_sched_rules none = {0}, tolerant = {0}, extra = {0};
    kiln_toleration gpu = tol("gpu", "Equal", "reserved", "NoSchedule");
    tolerant.tolerations[KILN_ROLE_MASTER] = &gpu;
    tolerant.n_tolerations[KILN_ROLE_MASTER] = 1;
    extra.extra = &gpu; /* a flavor's toleration, every role's */
    extra.n_extra = 1;

    /* 1 GPU, untolerating: the untainted node, though the 1-GPU soft node
     * fits better (PreferNoSchedule: last) */
    kiln_replica_plan one[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_TESLA_V100", 1)};
    CHECK(kiln_sched_place_rules(s, one, 1, &none, &p[0], why, sizeof why) == KILN_OK);
    CHECK(p[0].n == 1 && p[0].slots[0].node == 2);
    /* 2 more: plain has one left, soft one: the last resort is taken now */
    CHECK(kiln_sched_place_rules(s, one, 1, &none, &p[1], why, sizeof why) == KILN_OK);
    CHECK(p[1].n == 1 && p[1].slots[0].node == 2);
    CHECK(kiln_sched_place_rules(s, one, 1, &none, &p[2], why, sizeof why) == KILN_OK);
    CHECK(p[2].n == 1 && p[2].slots[0].node == 1);
    /* nothing untainted is free: it waits (the tainted node is not for it) */
    CHECK(kiln_sched_place_rules(s, one, 1, &none, &p[3], why, sizeof why) == KILN_ECONFLICT);
    CHECK(kiln_sched_free_devices(s, 0) == 4);
    /* tolerating, it takes the tainted node; so does a flavor's toleration */
    CHECK(kiln_sched_place_rules(s, one, 1, &tolerant, &p[3], why, sizeof why) == KILN_OK);
    CHECK(p[3].n == 1 && p[3].slots[0].node == 0);
    kiln_sched_release(s, &p[3]);
    kiln_placement_free(&p[3]);
    CHECK(kiln_sched_place_rules(s, one, 1, &extra, &p[3], why, sizeof why) == KILN_OK);
    CHECK(p[3].n == 1 && p[3].slots[0].node == 0);
    kiln_sched_release(s, &p[3]);
    kiln_placement_free(&p[3]);
    for (int i = 0; i < 3; i++) {
        kiln_sched_release(s, &p[i]);
        kiln_placement_free(&p[i]);
    }

    /* 4 GPUs on one node: only the tainted node has them; untolerating, it
     * can never fit, and the reason names the taint */
    kiln_replica_plan four[1] = {plan(KILN_ROLE_MASTER, 1, "NVIDIA_TESLA_V100", 4)};
    CHECK(kiln_sched_place_rules(s, four, 1, &none, &p[0], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "taint it does not tolerate") && strstr(why, "gpu=reserved:NoSchedule"),
              "%s", why);
    CHECK(kiln_sched_place_rules(s, four, 1, &tolerant, &p[0], why, sizeof why) == KILN_OK);
    kiln_sched_release(s, &p[0]);
    kiln_placement_free(&p[0]);
    /* pinned to the tainted node by its selector: never, for the taint */
    kiln_map pin = {0};
    kiln_map_set(&pin, "kubernetes.io/hostname", "tainted");
    kiln_sched_rules pinned = {0};
    pinned.selector[KILN_ROLE_MASTER] = &pin;
    CHECK(kiln_sched_place_rules(s, one, 1, &pinned, &p[0], why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, "taint it does not tolerate") && strstr(why, "gpu=reserved:NoSchedule") &&
                  strstr(why, "node tainted"),
              "%s", why);
    /* the tolerations are part of the never-fits cache's key: tolerating,
     * the same shape fits */
    pinned.tolerations[KILN_ROLE_MASTER] = &gpu;
    pinned.n_tolerations[KILN_ROLE_MASTER] = 1;
    CHECK(kiln_sched_place_rules(s, one, 1, &pinned, &p[0], why, sizeof why) == KILN_OK);
    CHECK(p[0].n == 1 && p[0].slots[0].node == 0);
    kiln_sched_release(s, &p[0]);
    kiln_placement_free(&p[0]);
    /* a toleration for the wrong effect does not do */
    kiln_toleration wrong = tol("gpu", "Exists", NULL, "NoExecute");
    pinned.tolerations[KILN_ROLE_MASTER] = &wrong;
    CHECK(kiln_sched_place_rules(s, one, 1, &pinned, &p[0], why, sizeof why) == KILN_EINVAL);
    /* the verdicts themselves */
    CHECK(kiln_sched_taint_verdict(&none, KILN_ROLE_MASTER, &c.nodes[0], NULL) == 2);
    CHECK(kiln_sched_taint_verdict(&none, KILN_ROLE_MASTER, &c.nodes[1], NULL) == 1);
    CHECK(kiln_sched_taint_verdict(&none, KILN_ROLE_MASTER, &c.nodes[2], NULL) == 0);
    CHECK(kiln_sched_taint_verdict(&tolerant, KILN_ROLE_MASTER, &c.nodes[0], NULL) == 0);
    CHECK(kiln_sched_taint_verdict(&tolerant, KILN_ROLE_WORKER, &c.nodes[0], NULL) == 2);
    kiln_map_clear(&pin);
    kiln_sched_free(s);
    kiln_cluster_free(&c);
    kiln_diag_free(&d);
}

int main(void)
{
    matching();
    validation();
    noexecute();
    node_config();
    job_model();
    placement();
    TEST_DONE();
}

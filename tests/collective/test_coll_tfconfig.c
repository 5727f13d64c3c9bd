/* test_coll_tfconfig.c - the all-reduce group from TF_CONFIG (facts §6):
 * chief or master is rank 0, worker i is rank i+1 (i without a chief), ps and
 * evaluator are outside the group; malformed input gets a sentence naming
 * the JSON path. */
#include "kiln/collective.h"
#include "test.h"

#include <stdlib.h>

static kiln_tf_group g;
static char err[512];

static kiln_err parse(const char *json)
{
    kiln_tf_group_free(&g);
    return kiln_tf_config_parse(json, &g, err, sizeof err);
}

static void bad(const char *json, const char *needle)
{
    kiln_err e = parse(json);
    CHECK_MSG(e == KILN_EINVAL, "accepted: %s", json);
    CHECK_MSG(strstr(err, needle) != NULL, "error for %s is \"%s\", wanted \"%s\"", json, err,
              needle);
    CHECK(g.world_size == 0 && g.hosts == NULL && g.rank == -1);
    CHECK(g.num_ps == 0 && g.ps_hosts == NULL);
}

int main(void)
{
    /* as the platform writes it (src/exec/env.c): master, workers, ps, job, environment */
    const char *plat = "{\"cluster\":{\"master\":[\"10.0.0.1:2222\"],\"worker\":[\"10.0.0.2:2222\","
                       "\"10.0.0.3:2222\"],\"ps\":[\"10.0.0.4:2222\"]},\"task\":{\"type\":"
                       "\"worker\",\"index\":1},\"job\":{\"scaleTier\":\"CUSTOM\"},"
                       "\"environment\":\"cloud\"}";
    CHECK(parse(plat) == KILN_OK);
    CHECK(g.world_size == 3 && g.rank == 2 && g.task_index == 1 && g.num_ps == 1);
    CHECK_STR(g.task_type, "worker");
    CHECK_STR(g.hosts[0], "10.0.0.1:2222");
    CHECK_STR(g.hosts[1], "10.0.0.2:2222");
    CHECK_STR(g.hosts[2], "10.0.0.3:2222");
    CHECK_STR(g.ps_hosts[0], "10.0.0.4:2222");
    CHECK(strlen(g.key) == 18 && strncmp(g.key, "tf", 2) == 0);
    char key1buf[24];
    const char *key1 = key1buf;
    memcpy(key1buf, g.key, sizeof key1buf);

    /* the same cluster seen by the master: same group, rank 0, same key */
    CHECK(parse("{\"cluster\":{\"master\":[\"10.0.0.1:2222\"],\"worker\":[\"10.0.0.2:2222\","
                "\"10.0.0.3:2222\"],\"ps\":[\"10.0.0.4:2222\"]},\"task\":{\"type\":\"master\","
                "\"index\":0}}") == KILN_OK);
    CHECK(g.rank == 0 && g.world_size == 3);
    CHECK_STR(g.key, key1);
    /* key order in the JSON does not matter; the cluster does */
    CHECK(parse("{\"task\":{\"index\":0,\"type\":\"worker\"},\"cluster\":{\"ps\":[\"10.0.0.4:"
                "2222\"],\"worker\":[\"10.0.0.2:2222\",\"10.0.0.3:2222\"],\"master\":[\"10.0.0.1:"
                "2222\"]}}") == KILN_OK);
    CHECK(g.rank == 1);
    CHECK_STR(g.key, key1);
    CHECK(parse("{\"cluster\":{\"master\":[\"10.0.0.1:2223\"],\"worker\":[\"10.0.0.2:2222\"]},"
                "\"task\":{\"type\":\"worker\",\"index\":0}}") == KILN_OK);
    CHECK(strcmp(g.key, key1) != 0);

    /* chief instead of master (useChiefInTfConfig) */
    CHECK(parse("{\"cluster\":{\"chief\":[\"a:1\"],\"worker\":[\"b:1\"]},\"task\":{\"type\":"
                "\"chief\",\"index\":0}}") == KILN_OK);
    CHECK(g.rank == 0 && g.world_size == 2);
    CHECK(g.num_ps == 0 && g.ps_hosts == NULL);
    CHECK_STR(g.task_type, "chief");
    CHECK(parse("{\"cluster\":{\"chief\":[\"a:1\"],\"worker\":[\"b:1\"]},\"task\":{\"type\":"
                "\"worker\",\"index\":0}}") == KILN_OK);
    CHECK(g.rank == 1);
    /* workers only: worker i is rank i; index defaults to 0 as in TensorFlow */
    CHECK(parse("{\"cluster\":{\"worker\":[\"a:1\",\"b:1\",\"c:1\"]},\"task\":{\"type\":"
                "\"worker\",\"index\":2}}") == KILN_OK);
    CHECK(g.rank == 2 && g.world_size == 3);
    CHECK(parse("{\"cluster\":{\"worker\":[\"a:1\",\"b:1\"]},\"task\":{\"type\":\"worker\"}}") ==
          KILN_OK);
    CHECK(g.rank == 0);
    /* one master alone: a group of one */
    CHECK(parse("{\"cluster\":{\"master\":[\"localhost:2222\"]},\"task\":{\"type\":\"master\","
                "\"index\":0},\"environment\":\"cloud\"}") == KILN_OK);
    CHECK(g.rank == 0 && g.world_size == 1);

    /* ps: knows the group, has no rank in it */
    CHECK(parse("{\"cluster\":{\"chief\":[\"a:1\"],\"worker\":[\"b:1\"],\"ps\":[\"p:1\",\"q:1\"]}"
                ",\"task\":{\"type\":\"ps\",\"index\":1}}") == KILN_OK);
    CHECK(g.rank == -1 && g.world_size == 2 && g.num_ps == 2);
    CHECK_STR(g.ps_hosts[0], "p:1");
    CHECK_STR(g.ps_hosts[1], "q:1");
    /* evaluator: a task outside the cluster, no rank */
    CHECK(parse("{\"cluster\":{\"chief\":[\"a:1\"],\"worker\":[\"b:1\"]},\"task\":{\"type\":"
                "\"evaluator\",\"index\":0}}") == KILN_OK);
    CHECK(g.rank == -1 && g.world_size == 2);
    CHECK_STR(g.task_type, "evaluator");
    /* a cluster that lists evaluators anyway: still not in the group */
    CHECK(parse("{\"cluster\":{\"chief\":[\"a:1\"],\"worker\":[\"b:1\"],\"evaluator\":[\"e:1\"]}"
                ",\"task\":{\"type\":\"worker\",\"index\":0}}") == KILN_OK);
    CHECK(g.world_size == 2 && g.rank == 1);

    /* not set: one replica */
    kiln_tf_group_free(&g);
    CHECK(kiln_tf_config_parse(NULL, &g, err, sizeof err) == KILN_ENOTFOUND);
    CHECK(kiln_tf_config_parse("", &g, err, sizeof err) == KILN_ENOTFOUND);

    /* malformed */
    bad("{\"cluster\":", "not valid JSON");
    bad("[1,2]", "expected a JSON object");
    bad("{\"task\":{\"type\":\"worker\",\"index\":0}}", "TF_CONFIG.cluster: missing");
    bad("{\"cluster\":[],\"task\":{}}", "TF_CONFIG.cluster: expected an object");
    bad("{\"cluster\":{\"worker\":[\"a:1\"]}}", "TF_CONFIG.task: missing");
    bad("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"index\":0}}", "TF_CONFIG.task.type");
    bad("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":\"0\"}}",
        "TF_CONFIG.task.index: expected an integer");
    bad("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":-1}}",
        "TF_CONFIG.task.index");
    bad("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":1}}",
        "worker 1, but the cluster has 1 worker");
    bad("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"gardener\",\"index\":0}}",
        "\"gardener\" is not one of");
    bad("{\"cluster\":{\"chief\":[\"a:1\"],\"master\":[\"b:1\"]},\"task\":{\"type\":\"chief\"}}",
        "both \"chief\" and \"master\"");
    bad("{\"cluster\":{\"chief\":[\"a:1\",\"c:1\"]},\"task\":{\"type\":\"chief\"}}",
        "TF_CONFIG.cluster.chief: has 2 tasks");
    bad("{\"cluster\":{\"master\":[\"a:1\"]},\"task\":{\"type\":\"chief\",\"index\":0}}",
        "\"chief\" but the cluster has a \"master\"");
    bad("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"master\",\"index\":0}}",
        "no chief or master");
    bad("{\"cluster\":{\"master\":[\"a:1\"]},\"task\":{\"type\":\"master\",\"index\":1}}",
        "one master");
    bad("{\"cluster\":{\"worker\":\"a:1\"},\"task\":{\"type\":\"worker\"}}",
        "TF_CONFIG.cluster.worker: expected an array");
    bad("{\"cluster\":{\"worker\":[\"a:1\",7]},\"task\":{\"type\":\"worker\"}}",
        "TF_CONFIG.cluster.worker[1]");
    bad("{\"cluster\":{\"worker\":[\"\"]},\"task\":{\"type\":\"worker\"}}", "empty string");
    bad("{\"cluster\":{\"ps\":[\"p:1\"]},\"task\":{\"type\":\"ps\"}}",
        "no chief, master or worker");
    bad("{\"cluster\":{\"worker\":[\"a:1\"]},\"cluster\":{},\"task\":{\"type\":\"worker\"}}",
        "not valid JSON"); /* duplicate keys are rejected, not silently merged */
    bad("{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"a:1\"]},\"task\":{\"type\":\"ps\","
        "\"index\":3}}",
        "ps 3, but the cluster has 1 ps");

    /* config from the group */
    CHECK(parse(plat) == KILN_OK);
    unsetenv("KILN_COLL_KEY");
    kiln_comm_config cfg = kiln_comm_config_from_tf(&g);
    CHECK(cfg.rank == 2 && cfg.world_size == 3 && cfg.hosts == g.hosts);
    CHECK_STR(cfg.job_key, g.key);
    setenv("KILN_COLL_KEY", "job42-attempt3", 1);
    cfg = kiln_comm_config_from_tf(&g);
    CHECK_STR(cfg.job_key, "job42-attempt3");
    unsetenv("KILN_COLL_KEY");
    kiln_tf_group_free(&g);
    TEST_DONE();
}

/* tests/service/test_claims.c - the node config's persistentVolumeClaims
 * (kiln/claims.h): the table's form, the check at create (an undefined
 * claim refused naming it and the table; ReadWriteOncePod one replica;
 * ReadWriteOnce on one node: its node joins the nodeSelector), and the bind
 * each claim mount becomes (ReadOnlyMany read-only). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/claims.h"
#include "test.h"

static kiln_err load(const char *json, kiln_claims *c, kiln_diag *d)
{
    json_t *root = json_loads(json, 0, NULL);
    CHECK(root != NULL);
    kiln_err err = kiln_claims_from_json(root, c, d);
    json_decref(root);
    return err;
}

static bool has(const kiln_diag *d, const char *field, const char *needle)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i].field, field) == 0 && strstr(d->v[i].description, needle)) return true;
    kiln_diag_print(d, stderr);
    return false;
}

/* a job whose master (and `workers` workers) mount `mount` */
static kiln_job *job_with(const char *mount, int workers)
{
    kiln_job *j = kiln_job_new();
    kiln_training_input *ti = &j->training_input;
    j->has_training_input = true;
    ti->has_master_config = true;
    kiln_strv_push(&ti->master_config.claim_mounts, mount);
    if (workers) {
        ti->worker_count = workers;
        ti->has_worker_config = true;
        kiln_strv_push(&ti->worker_config.claim_mounts, mount);
    }
    return j;
}

static void test_table(void)
{
    kiln_claims c = {0};
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(load("{\"persistentVolumeClaims\": {"
               "\"data\": {\"path\": \"/srv/data\", \"accessMode\": \"ReadOnlyMany\"},"
               "\"ckpt\": {\"path\": \"/srv/ckpt\", \"accessMode\": \"ReadWriteMany\"},"
               "\"local\": {\"path\": \"/srv/l\", \"node\": \"vm2\"},"
               "\"solo\": {\"path\": \"/srv/s\", \"accessMode\": \"ReadWriteOncePod\"}}}",
               &c, &d) == KILN_OK);
    CHECK(c.n == 4 && d.n == 0);
    const kiln_claim *l = kiln_claims_find(&c, "local");
    CHECK(l && l->mode == KILN_CLAIM_RWO && strcmp(l->node, "vm2") == 0);

    /* binds: ReadOnlyMany is read-only even where the file did not say so */
    char *b = kiln_claims_bind(&c, "data:/data");
    CHECK_STR(b, "/srv/data:/data:ro");
    free(b);
    b = kiln_claims_bind(&c, "ckpt:/ckpt");
    CHECK_STR(b, "/srv/ckpt:/ckpt");
    free(b);
    b = kiln_claims_bind(&c, "ckpt:/ckpt:ro");
    CHECK_STR(b, "/srv/ckpt:/ckpt:ro");
    free(b);
    CHECK(kiln_claims_bind(&c, "nope:/x") == NULL);

    /* at create */
    kiln_job *j = job_with("missing:/m", 0);
    CHECK(kiln_claims_check_job(&c, j, 1, &d) == KILN_EINVAL);
    CHECK(has(&d, "trainingInput.masterConfig.claimMounts[0]",
              "claim 'missing' is not defined in the node config's persistentVolumeClaims "
              "(this kilnd's: data, ckpt, local, solo)"));
    kiln_job_free(j);
    kiln_diag_clear(&d);
    j = job_with("solo:/s", 2);
    CHECK(kiln_claims_check_job(&c, j, 1, &d) == KILN_EINVAL);
    CHECK(has(&d, "trainingInput.workerConfig.claimMounts[0]", "ReadWriteOncePod"));
    kiln_job_free(j);
    kiln_diag_clear(&d);
    j = job_with("local:/l", 1);
    CHECK(kiln_claims_check_job(&c, j, 3, &d) == KILN_OK && d.n == 0);
    CHECK_STR(kiln_map_get(&j->training_input.master_config.node_selector, "kiln.dev/node"), "vm2");
    CHECK_STR(kiln_map_get(&j->training_input.worker_config.node_selector, "kiln.dev/node"), "vm2");
    kiln_job_free(j);
    j = job_with("ckpt:/c", 3);
    CHECK(kiln_claims_check_job(&c, j, 3, &d) == KILN_OK && d.n == 0);
    kiln_job_free(j);
    kiln_claims_free(&c);

    /* ReadWriteOnce with no node, on several nodes: refused */
    CHECK(load("{\"persistentVolumeClaims\": {\"w\": {\"path\": \"/srv/w\"}}}", &c, &d) == KILN_OK);
    j = job_with("w:/w", 1);
    CHECK(kiln_claims_check_job(&c, j, 2, &d) == KILN_EINVAL);
    CHECK(has(&d, "trainingInput.masterConfig.claimMounts[0]", "ReadWriteOnce (one node)"));
    kiln_diag_clear(&d);
    kiln_job_free(j);
    j = job_with("w:/w:ro", 1); /* read-only: any node */
    CHECK(kiln_claims_check_job(&c, j, 2, &d) == KILN_OK);
    kiln_job_free(j);
    kiln_claims_free(&c);

    /* the table's own errors, at their paths */
    CHECK(load("{\"persistentVolumeClaims\": {\"a\": {\"path\": \"rel\", \"accessMode\": "
               "\"Sometimes\"}, \"b\": {\"path\": \"/x\", \"node\": \"n\", \"accessMode\": "
               "\"ReadWriteMany\"}}}",
               &c, &d) == KILN_EINVAL);
    CHECK(has(&d, "persistentVolumeClaims.a.path", "absolute directory"));
    CHECK(has(&d, "persistentVolumeClaims.a.accessMode", "not an access mode"));
    CHECK(has(&d, "persistentVolumeClaims.b.node", "only a ReadWriteOnce claim"));
    kiln_claims_free(&c);
    kiln_diag_free(&d);
    CHECK(load("{}", &c, &d) == KILN_OK && c.n == 0);
    kiln_claims_free(&c);
}

int main(void)
{
    test_table();
    TEST_DONE();
}

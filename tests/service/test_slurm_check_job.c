/* tests/service/test_slurm_check_job.c - under --executor slurm a process
 * replica's securityContext noNewPrivileges is refused at create
 * (kiln_slurm_check_job): kiln-monitor would set no_new_privs on srun, and
 * slurmstepd starts the step on its node without it. A container's is
 * podman's, on the node, and passes; so does a process without it. */
#include <stdio.h>
#include <string.h>

#include "exec/slurm/slurm.h"
#include "kiln/auth.h"
#include "kiln/catalog.h"
#include "kiln/exec.h"
#include "kiln/job.h"
#include "test.h"

static kiln_job *job_of(const char *master_members)
{
    char buf[1024];
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    snprintf(buf, sizeof buf,
             "{\"jobId\":\"j\",\"trainingInput\":{\"scaleTier\":\"BASIC\",\"region\":"
             "\"us-central1\",\"masterConfig\":{\"containerCommand\":[\"true\"]%s}}}",
             master_members);
    CHECK(kiln_job_from_json(buf, strlen(buf), &job, &d) == KILN_OK);
    kiln_diag_free(&d);
    return job;
}

/* kiln_slurm_check_job of a job with masterConfig `members`: true, or false
 * at `field` (NULL: expected true). */
static void expect(const kiln_slurm_cfg *sc, const char *members, const char *field)
{
    char f[256] = "", why[1024] = "";
    kiln_job *job = job_of(members);
    bool ok = job && kiln_slurm_check_job(sc, NULL, job, f, sizeof f, why, sizeof why);
    if (field == NULL)
        CHECK_MSG(ok, "refused at %s: %s", f, why);
    else
        CHECK_MSG(!ok && strcmp(f, field) == 0 && strstr(why, "slurmstepd"),
                  "wanted a refusal at %s, got '%s': %s", field, f, why);
    kiln_job_free(job);
}

int main(void)
{
    kiln_catalog *cat = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_catalog_default(&cat, &d) == KILN_OK);
    kiln_users *users = kiln_users_new(true);
    kiln_exec_config exec = {.container_runtime = "/usr/bin/podman"};
    kiln_slurm_cfg sc = {.partition = "p", .catalog = cat, .users = users, .exec = &exec};
    if (!cat || !users) return 1;
    expect(&sc, ",\"securityContext\":{\"noNewPrivileges\":true}",
           "trainingInput.masterConfig.securityContext.noNewPrivileges");
    expect(&sc, ",\"imageUri\":\"reg/t:1\",\"securityContext\":{\"noNewPrivileges\":true}", NULL);
    expect(&sc, ",\"securityContext\":{\"capDrop\":[\"ALL\"]}", NULL);
    expect(&sc, "", NULL);
    kiln_users_free(users);
    kiln_catalog_free(cat);
    kiln_diag_free(&d);
    TEST_DONE();
}

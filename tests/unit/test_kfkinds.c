/* test_kfkinds.c - Kubeflow JAXJob, PaddleJob and XGBoostJob -> kiln_job
 * (src/spec/kfkinds.c): replica types and counts, the program's container,
 * the operator's defaults and webhook rules, each refusal at its path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "kubeflow_test.h"
#include "test.h"

static void test_jaxjob(void)
{
    kiln_job *job = kubeflow_example("jaxjob-cpu.yaml");
    if (!job) return;
    const kiln_training_input *ti = &job->training_input;
    CHECK_STR(job->job_id, "jax_allgather");
    CHECK(ti->has_kubeflow_job && ti->kubeflow_job.workers_only);
    CHECK_STR(ti->kubeflow_job.kind, "JAXJob");
    CHECK(!ti->has_pytorch_job);
    /* worker 0 is kiln's master, worker 1 its one worker */
    CHECK(ti->has_master_config && ti->worker_count == 1);
    CHECK_STR(ti->master_config.image_uri, "localhost/kiln-examples/jax:0.1");
    CHECK_STR(ti->worker_config.container_command.v[1], "allgather.py");
    /* the operator's default restart policy: Never */
    CHECK_STR(ti->master_config.restart_policy, "Never");
    CHECK_STR(ti->worker_config.restart_policy, "Never");
    /* kubeflowJob survives the store's JSON */
    char *json = kiln_job_to_json(job, KILN_ENC_COMPACT);
    CHECK(json && strstr(json, "\"kubeflowJob\":{\"kind\":\"JAXJob\",\"workersOnly\":true}"));
    kiln_job *back = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(json && kiln_job_from_json(json, strlen(json), &back, &d) == KILN_OK);
    if (back) CHECK_STR(back->training_input.kubeflow_job.kind, "JAXJob");
    kiln_job_free(back);
    kiln_diag_free(&d);
    free(json);
    kiln_job_free(job);
}

static void test_paddlejob(void)
{
    kiln_job *job = kubeflow_example("paddlejob-collective.yaml");
    if (!job) return;
    const kiln_training_input *ti = &job->training_input;
    CHECK_STR(ti->kubeflow_job.kind, "PaddleJob");
    CHECK(ti->kubeflow_job.workers_only && ti->worker_count == 2);
    CHECK_STR(ti->master_config.restart_policy, "OnFailure"); /* Paddle's default */
    CHECK(ti->has_run_policy && ti->run_policy.backoff_limit == 2);
    kiln_job_free(job);
    /* PS mode: a Master is kiln's master */
    kiln_diag d = KILN_DIAG_INIT;
    job = decode("apiVersion: kubeflow.org/v1\nkind: PaddleJob\nmetadata: {name: ps}\nspec:\n"
                 "  paddleReplicaSpecs:\n"
                 "    Master: {replicas: 1, template: {spec: {containers: [{name: paddle, "
                 "image: p}]}}}\n"
                 "    Worker: {replicas: 2, template: {spec: {containers: [{name: paddle, "
                 "image: p}]}}}\n",
                 &d, NULL);
    CHECK(job && !job->training_input.kubeflow_job.workers_only &&
          job->training_input.worker_count == 2);
    kiln_job_free(job);
    kiln_diag_free(&d);
    expect_bad("apiVersion: kubeflow.org/v1\nkind: PaddleJob\nmetadata: {name: e}\nspec:\n"
               "  elasticPolicy: {minReplicas: 1}\n"
               "  paddleReplicaSpecs:\n    Worker: {template: {spec: {containers: "
               "[{name: paddle, image: p}]}}}\n",
               "spec.elasticPolicy", "not supported for a PaddleJob");
}

static void test_xgboostjob(void)
{
    kiln_job *job = kubeflow_example("xgboostjob-rabit.yaml");
    if (!job) return;
    const kiln_training_input *ti = &job->training_input;
    CHECK_STR(ti->kubeflow_job.kind, "XGBoostJob");
    CHECK(!ti->kubeflow_job.workers_only && ti->worker_count == 2);
    CHECK_STR(ti->worker_config.restart_policy, "ExitCode"); /* the file's own */
    kiln_job_free(job);
#define XGB(specs)                                                                                 \
    "apiVersion: kubeflow.org/v1\nkind: XGBoostJob\nmetadata: {name: x}\nspec:\n"                  \
    "  xgbReplicaSpecs:\n" specs
#define XPOD "template: {spec: {containers: [{name: xgboost, image: x}]}}"
    /* the webhook's rules: a Master, of 1 replica; the xgboost container */
    expect_bad(XGB("    Worker: {replicas: 2, " XPOD "}\n"), "spec.xgbReplicaSpecs.Master",
               "must be present");
    expect_bad(XGB("    Master: {replicas: 2, " XPOD "}\n"), "spec.xgbReplicaSpecs.Master.replicas",
               "must be 1: an XGBoostJob has exactly one Master");
    expect_bad("apiVersion: kubeflow.org/v1\nkind: PaddleJob\nmetadata: {name: p}\nspec:\n"
               "  paddleReplicaSpecs:\n    Master: {replicas: 2, template: {spec: {containers: "
               "[{name: paddle, image: p}]}}}\n",
               "spec.paddleReplicaSpecs.Master.replicas", "not supported yet");
    expect_bad(XGB("    Master: {template: {spec: {containers: [{name: main, image: x}]}}}\n"),
               "spec.xgbReplicaSpecs.Master.template.spec.containers", "named 'xgboost'");
    expect_bad(XGB("    Master: {" XPOD "}\n    Chief: {" XPOD "}\n"), "spec.xgbReplicaSpecs",
               "'Chief' is not a XGBoostJob replica type; use Master or Worker");
    /* a variable the operator sets is refused where the file sets it */
    expect_bad(XGB("    Master: {template: {spec: {containers: [{name: xgboost, image: x, "
                   "env: [{name: WORKER_ADDRS, value: a}]}]}}}\n"),
               "spec.xgbReplicaSpecs.Master.template.spec.containers[0].env[0]",
               "set by the XGBoostJob operator");
    /* only the operator's own port */
    expect_bad(XGB("    Master: {template: {spec: {containers: [{name: xgboost, image: x, "
                   "ports: [{name: http, containerPort: 80}]}]}}}\n"),
               "spec.xgbReplicaSpecs.Master.template.spec.containers[0].ports[0]",
               "name: xgboostjob-port");
    expect_bad(XGB("    Master: {" XPOD "}\n  successPolicy: x\n"), "spec.successPolicy",
               "not supported by kiln");
#undef XGB
#undef XPOD
}

static void test_jax_rules(void)
{
#define JAX(specs) "apiVersion: kubeflow.org/v1\nkind: JAXJob\nmetadata: {name: j}\nspec:\n" specs
    expect_bad(JAX("  jaxReplicaSpecs:\n    Master: {template: {spec: {containers: [{name: jax, "
                   "image: j}]}}}\n"),
               "spec.jaxReplicaSpecs", "not a JAXJob replica type; use Worker");
    expect_bad(JAX("  runPolicy: {}\n"), "spec.jaxReplicaSpecs", "required");
    expect_bad(JAX("  jaxReplicaSpecs:\n    Worker: {replicas: 0, template: {spec: {containers: "
                   "[{name: jax, image: j}]}}}\n"),
               "spec.jaxReplicaSpecs.Worker.replicas", "at least 1");
    expect_bad(JAX("  jaxReplicaSpecs:\n    Worker: {template: {spec: {containers: [{name: jax, "
                   "image: j, env: [{name: PROCESS_ID, value: '3'}]}]}}}\n"),
               "spec.jaxReplicaSpecs.Worker.template.spec.containers[0].env[0]",
               "PROCESS_ID is set by the JAXJob operator");
    /* suspend is still refused for every kind */
    expect_bad(JAX("  runPolicy: {suspend: true}\n  jaxReplicaSpecs:\n    Worker: {template: "
                   "{spec: {containers: [{name: jax, image: j}]}}}\n"),
               "spec.runPolicy.suspend", "suspended JAXJobs");
#undef JAX
}

int main(void)
{
    test_jaxjob();
    test_paddlejob();
    test_xgboostjob();
    test_jax_rules();
    TEST_DONE();
}

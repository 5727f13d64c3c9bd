/* src/exec/kfenv.h - the environment the Kubeflow training operator sets on
 * the replicas of a JAXJob, PaddleJob or XGBoostJob (kubeflowJob.kind), with
 * kiln's addresses where the operator writes its Services' names. Internal
 * to src/exec (env.c calls it). */
#ifndef KILN_EXEC_KFENV_H
#define KILN_EXEC_KFENV_H

#include "kiln/exec.h"

/* Appends tasks[self]'s variables to `env` ("NAME=VALUE"); a job of another
 * kind gets none. KILN_ENOMEM is the only error. */
kiln_err kiln__exec_kubeflow_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n,
                                 size_t self, kiln_strv *env);

#endif

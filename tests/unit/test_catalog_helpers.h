/* test_catalog_helpers.h - building kiln_jobs in C for the catalog tests, and
 * checking what the validator reported. Include after test.h. */
#ifndef KILN_TEST_CATALOG_HELPERS_H
#define KILN_TEST_CATALOG_HELPERS_H

#include <stdlib.h>
#include <string.h>

#include "kiln/catalog.h"

/* A job that validates: CUSTOM, one n1-standard-4 master in us-central1. */
static inline kiln_job *mkjob(const char *tier, const char *region)
{
    kiln_job *j = kiln_job_new();
    if (!j) abort();
    kiln_set_str(&j->job_id, "job_1");
    j->has_training_input = true;
    kiln_set_str(&j->training_input.scale_tier, tier);
    kiln_set_str(&j->training_input.region, region);
    return j;
}

static inline kiln_replica_config *role_cfg(kiln_job *j, kiln_role r)
{
    kiln_training_input *ti = &j->training_input;
    switch (r) {
    case KILN_ROLE_WORKER:
        ti->has_worker_config = true;
        return &ti->worker_config;
    case KILN_ROLE_PARAMETER_SERVER:
        ti->has_parameter_server_config = true;
        return &ti->parameter_server_config;
    case KILN_ROLE_EVALUATOR:
        ti->has_evaluator_config = true;
        return &ti->evaluator_config;
    default:
        ti->has_master_config = true;
        return &ti->master_config;
    }
}

static inline void set_role(kiln_job *j, kiln_role r, const char *type, int64_t count)
{
    kiln_training_input *ti = &j->training_input;
    switch (r) {
    case KILN_ROLE_MASTER:
        kiln_set_str(&ti->master_type, type);
        break;
    case KILN_ROLE_WORKER:
        kiln_set_str(&ti->worker_type, type);
        ti->worker_count = count;
        break;
    case KILN_ROLE_PARAMETER_SERVER:
        kiln_set_str(&ti->parameter_server_type, type);
        ti->parameter_server_count = count;
        break;
    default:
        kiln_set_str(&ti->evaluator_type, type);
        ti->evaluator_count = count;
        break;
    }
}

static inline void set_accel(kiln_job *j, kiln_role r, const char *type, int64_t count)
{
    kiln_replica_config *rc = role_cfg(j, r);
    rc->has_accelerator_config = true;
    kiln_set_str(&rc->accelerator_config.type, type);
    rc->accelerator_config.count = count;
}

static inline kiln_job *mkcustom(const char *master, const char *accel, int64_t count)
{
    kiln_job *j = mkjob("CUSTOM", "us-central1");
    set_role(j, KILN_ROLE_MASTER, master, 1);
    if (accel) set_accel(j, KILN_ROLE_MASTER, accel, count);
    return j;
}

/* Validates into a fresh diag; returns the number of violations. */
static inline size_t run_validate(const kiln_catalog *c, const kiln_job *j, kiln_diag *d)
{
    kiln_diag_clear(d);
    kiln_err e = kiln_catalog_validate(c, j, d);
    if ((e == KILN_OK) != (d->n == 0)) {
        fprintf(stderr, "validate returned %d with %zu violations\n", (int)e, d->n);
        test_failed++;
    }
    return d->n;
}

/* The description of the first violation at `field`, or NULL. */
static inline const char *diag_desc(const kiln_diag *d, const char *field)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i].field, field) == 0) return d->v[i].description;
    return NULL;
}

#define CHECK_VALID(c, j, d)                                                                       \
    do {                                                                                           \
        size_t n_ = run_validate((c), (j), (d));                                                   \
        CHECK_MSG(n_ == 0, "expected no violations, got %zu", n_);                                 \
        if (n_) kiln_diag_print((d), stderr);                                                      \
    } while (0)

/* Exactly one violation, at `field`. */
#define CHECK_ONLY(c, j, d, field)                                                                 \
    do {                                                                                           \
        size_t n_ = run_validate((c), (j), (d));                                                   \
        CHECK_MSG(n_ == 1 && kiln_diag_has((d), (field)), "expected one violation at %s",          \
                  (field));                                                                        \
        if (n_ != 1 || !kiln_diag_has((d), (field))) kiln_diag_print((d), stderr);                 \
    } while (0)

/* `needle` appears in the description at `field`. */
#define CHECK_SAYS(d, field, needle)                                                               \
    do {                                                                                           \
        const char *s_ = diag_desc((d), (field));                                                  \
        CHECK_MSG(s_ &&strstr(s_, (needle)), "at %s expected \"%s\" in \"%s\"", (field), (needle), \
                  s_ ? s_ : "(no violation)");                                                     \
    } while (0)

static inline kiln_catalog *load_default(void)
{
    kiln_catalog *c = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    if (kiln_catalog_default(&c, &d) != KILN_OK) {
        kiln_diag_print(&d, stderr);
        fprintf(stderr, "the default catalog does not load\n");
        exit(1);
    }
    kiln_diag_free(&d);
    return c;
}

#endif

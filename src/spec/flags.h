/* src/spec/flags.h - small parsers shared by the command-line front end
 * (flags.c), the Kubeflow front ends (kubeflow.c, tfjob.c) and the Job
 * model's decoder (codec.c). Internal to src/spec. */
#ifndef KILN_SPEC_FLAGS_H
#define KILN_SPEC_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parses a whole string as a decimal int64 (optional leading '-', no spaces,
 * no '+', no trailing junk). false on syntax error or overflow. */
bool kiln__parse_i64(const char *s, int64_t *out);

/* A boolean as YAML text spells it: true/True/TRUE or false/False/FALSE (the
 * YAML 1.2 core schema, what Kubernetes reads). false for anything else,
 * NULL and YAML 1.1's yes/no/on/off included: a "yes" must not read as false. */
bool kiln__parse_bool(const char *s, bool *out);

/* Turns an accelerator name as gcloud and GKE write it ("nvidia-tesla-t4")
 * into the API's enum form ("NVIDIA_TESLA_T4"); names already in enum form
 * pass through. Only letters, digits, '-' and '_' are allowed. Returns a new
 * string (caller frees), or NULL when the name is empty, too long or has
 * other characters (and on ENOMEM). */
char *kiln__accelerator_enum(const char *name);

/* The Compute Engine machine type kiln picks for a replica that names no
 * machine type (TFJob pods): n1-standard-4 for CPU-only replicas and every
 * GPU type but the A100 (n1-standard-4 accepts every valid count of K80, P4,
 * P100, T4 and V100, facts §3), and the a2 type sized for the A100 count. */
const char *kiln__default_machine_type(const char *accelerator, int64_t count);

#include "util/utf8.h"

#endif

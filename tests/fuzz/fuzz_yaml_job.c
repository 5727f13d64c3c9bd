/* libFuzzer target: config.yaml (a Job in YAML), with the round-trip property of roundtrip.h. */
#define DECODE kiln_job_from_yaml
#include "roundtrip.h"

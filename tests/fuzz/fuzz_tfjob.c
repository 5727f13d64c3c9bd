/* libFuzzer target: Kubeflow TFJob YAML, with the round-trip property of roundtrip.h. */
#define DECODE kiln_job_from_tfjob
#include "roundtrip.h"

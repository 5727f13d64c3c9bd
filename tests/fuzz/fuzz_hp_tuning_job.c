/* libFuzzer target: a Vertex AI HyperparameterTuningJob (aiplatform v1 JSON),
 * with the round-trip property of roundtrip.h. */
#define DECODE kiln_job_from_hp_tuning_job
#include "roundtrip.h"

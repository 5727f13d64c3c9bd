/* libFuzzer target: Job JSON, with the round-trip property of roundtrip.h. */
#define DECODE kiln_job_from_json
#include "roundtrip.h"

/* libFuzzer target: Kubeflow jobs read by kind (PyTorchJob, TFJob, several
 * documents, other kinds), with the round-trip property of roundtrip.h. */
#define DECODE kiln_job_from_kubeflow
#include "roundtrip.h"

/* libFuzzer target: a Vertex AI CustomJob (aiplatform v1 JSON) and, from the
 * same bytes, a TrainingPipeline (kiln_job_from_training_pipeline) and an
 * UploadModelRequest (kiln_vertex_upload_parse), with the
 * round-trip property of roundtrip.h, and one more: the CustomJob kiln shows
 * for the job (kiln_job_custom_job_spec) decodes back to the same job. */
#include <jansson.h>

#define DECODE kiln_job_from_custom_job_checked
#include "kiln/job.h"
static kiln_err kiln_job_from_custom_job_checked(const char *buf, size_t len, kiln_job **out,
                                                 kiln_diag *d);
#include "roundtrip.h"

static kiln_err kiln_job_from_custom_job_checked(const char *buf, size_t len, kiln_job **out,
                                                 kiln_diag *d)
{
    /* the same bytes as a TrainingPipeline too (its trainingTaskInputs is a
     * CustomJob's jobSpec): no crash, no leak, a job or a refusal */
    kiln_diag dp = KILN_DIAG_INIT;
    kiln_job *tp = NULL;
    kiln_err perr = kiln_job_from_training_pipeline(buf, len, &tp, &dp);
    if ((perr == KILN_OK) != (tp != NULL)) abort();
    kiln_job_free(tp);
    kiln_diag_free(&dp);
    /* and as models:upload's body: a Model, or a refusal that leaves nothing */
    kiln_vertex_upload u;
    dp = (kiln_diag)KILN_DIAG_INIT;
    kiln_err uerr = kiln_vertex_upload_parse(buf, len, &u, &dp);
    if ((uerr == KILN_OK) != (u.model != NULL)) abort();
    if (uerr != KILN_OK && (u.model_id || u.artifact_uri)) abort();
    if (u.model_id && !kiln_vertex_model_id_valid(u.model_id, strlen(u.model_id))) abort();
    kiln_vertex_upload_clear(&u);
    kiln_diag_free(&dp);
    kiln_err err = kiln_job_from_custom_job(buf, len, out, d);
    if (err != KILN_OK) return err;
    const kiln_job *job = *out;
    json_t *cj = json_object();
    json_t *spec = kiln_job_custom_job_spec(job);
    json_t *labels = json_object();
    if (!cj || !spec || !labels) abort();
    for (size_t i = 0; i < job->labels.n; i++)
        json_object_set_new(labels, job->labels.keys[i], json_string(job->labels.vals[i]));
    json_object_set_new(cj, "displayName", json_string(job->training_input.vertex.display_name));
    json_object_set_new(cj, "jobSpec", spec);
    json_object_set_new(cj, "labels", labels);
    char *s = json_dumps(cj, JSON_COMPACT);
    kiln_diag d2 = KILN_DIAG_INIT;
    kiln_job *back = NULL;
    if (!s || kiln_job_from_custom_job(s, strlen(s), &back, &d2) != KILN_OK ||
        !kiln_job_equal(job, back))
        abort();
    kiln_job_free(back);
    kiln_diag_free(&d2);
    free(s);
    json_decref(cj);
    return KILN_OK;
}

/* test_field_docs.c - every field kiln accepts has a row in docs/job-model.md
 * ("Every field, and what kiln does with it"), so a field cannot be added to
 * the parsers without saying what kiln does with it (issue 16).
 *
 * The fields come from the code, not from a list kept here: the Job
 * resource's field tables (src/spec/job.c, walked through kiln__job_msg) and
 * the Kubeflow key tables (src/spec/kubeflow.c, kiln__kf_key_tables). A row is
 * a table line starting "| `PATH` |". */
#include <stdlib.h>
#include <string.h>

#include "spec/kubeflow.h"
#include "spec/schema.h"
#include "test.h"

static char *doc;
static const char *table; /* the doc's subsection being checked (a NUL-ended copy) */
static int rows_checked;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL) {
        size_t got = fread(buf, 1, (size_t)n, f);
        buf[got] = '\0';
    }
    fclose(f);
    return buf;
}

/* The text of the subsection headed `heading` up to the next heading, as a
 * new string (NULL when there is no such heading): a row elsewhere in the doc
 * (the "kiln extensions" table has some of the same paths) does not count. */
static char *subsection(const char *heading)
{
    const char *at = strstr(doc, heading);
    if (!at) return NULL;
    at += strlen(heading);
    const char *end = strstr(at, "\n#");
    size_t n = end ? (size_t)(end - at) : strlen(at);
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, at, n);
        s[n] = '\0';
    }
    return s;
}

static bool has_row(const char *path)
{
    char row[512];
    snprintf(row, sizeof row, "\n| `%s` |", path);
    return strstr(table, row) != NULL;
}

static void need_row(const char *path)
{
    rows_checked++;
    CHECK_MSG(has_row(path), "docs/job-model.md's field table has no row for `%s`", path);
}

/* Every field of message `m` below `prefix`; a ReplicaConfig is written once,
 * as trainingInput.<role>Config, for the four roles. */
static void walk(const kiln__msg *m, const char *prefix)
{
    for (size_t i = 0; i < m->nfields; i++) {
        const kiln__field *f = &m->fields[i];
        char path[256];
        bool replica = f->msg && strcmp(f->msg->name, "ReplicaConfig") == 0;
        if (replica)
            snprintf(path, sizeof path, "%s<role>Config", prefix);
        else
            snprintf(path, sizeof path, "%s%s", prefix, f->name);
        need_row(path);
        if (f->kind == FK_MSG || f->kind == FK_MSGV) {
            char sub[272];
            snprintf(sub, sizeof sub, "%s%s.", path, f->kind == FK_MSGV ? "[]" : "");
            walk(f->msg, sub);
        }
    }
}

int main(void)
{
    doc = slurp(KILN_SOURCE_DIR "/docs/job-model.md");
    CHECK_MSG(doc != NULL, "cannot read docs/job-model.md");
    if (!doc) TEST_DONE();

    char *job_table = subsection("\n### The Job resource\n");
    char *kf_table = subsection("\n### Kubeflow TFJob and PyTorchJob\n");
    CHECK_MSG(job_table && kf_table, "docs/job-model.md lacks a field table's heading");
    if (!job_table || !kf_table) goto out;

    table = job_table;
    walk(&kiln__job_msg, "");
    int job_rows = rows_checked;
    /* the walk reaches every message: a sample from each depth */
    CHECK(job_rows > 100);
    /* the check itself can fail: a made-up field has no row, and a row of
     * another table ("kiln extensions") is not one of this table's */
    CHECK(!has_row("trainingInput.noSuchField"));
    CHECK(strstr(doc, "\n| `<role>Config.restartPolicy` |") != NULL);
    CHECK(!has_row("<role>Config.restartPolicy"));

    table = kf_table;
    for (const kiln__kf_keys *t = kiln__kf_key_tables; t->where; t++)
        for (size_t k = 0; t->keys[k]; k++) {
            char path[256];
            snprintf(path, sizeof path, "%s%s%s", t->where, *t->where ? "." : "", t->keys[k]);
            need_row(path);
        }
    CHECK(rows_checked - job_rows > 50);
    /* a Kubeflow key is looked for in the Kubeflow table only */
    CHECK(!has_row("trainingInput.runPolicy"));
out:
    free(job_table);
    free(kf_table);
    free(doc);
    TEST_DONE();
}

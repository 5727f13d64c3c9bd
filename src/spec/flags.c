/* src/spec/flags.c - gcloud-style command-line flags -> kiln_job (kiln/submit.h).
 *
 * One table row per flag says how its value is read (kind), where
 * kiln_submit_parse() keeps it (an offset into kiln_submit_args), and where
 * kiln_submit_build() puts it in the job (target). Adding a flag is adding a
 * row; docs/cli.md lists the same flags for users. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln/submit.h"
#include "spec/flags.h"
#include "util/utf8.h"
#include "spec/tree.h"
#include "util/suggest.h"

/* ---- shared parsers (spec/flags.h) ---- */

bool kiln__parse_i64(const char *s, int64_t *out)
{
    if (s == NULL || *s == '\0') return false;
    bool neg = (*s == '-');
    const char *p = neg ? s + 1 : s;
    if (*p == '\0') return false;
    uint64_t v = 0;
    const uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        unsigned digit = (unsigned)(*p - '0');
        if (v > (lim - digit) / 10) return false; /* would overflow */
        v = v * 10 + digit;
    }
    /* -INT64_MIN does not fit an int64, so negate in unsigned arithmetic */
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

bool kiln__parse_bool(const char *s, bool *out)
{
    static const char *const words[] = {"true", "True", "TRUE", "false", "False", "FALSE"};
    for (size_t i = 0; s && i < sizeof words / sizeof *words; i++)
        if (strcmp(s, words[i]) == 0) {
            *out = i < 3;
            return true;
        }
    return false;
}

#define ACCEL_NAME_MAX 64

char *kiln__accelerator_enum(const char *name)
{
    if (name == NULL) return NULL;
    size_t n = strlen(name);
    if (n == 0 || n > ACCEL_NAME_MAX) return NULL;
    char *out = malloc(n + 1);
    if (out == NULL) return NULL;
    for (size_t i = 0; i <= n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch == '\0' || isdigit(ch) || isupper(ch) || ch == '_')
            out[i] = (char)ch;
        else if (islower(ch))
            out[i] = (char)toupper(ch);
        else if (ch == '-')
            out[i] = '_';
        else {
            free(out);
            return NULL;
        }
    }
    return out;
}

const char *kiln__default_machine_type(const char *accelerator, int64_t count)
{
    if (accelerator == NULL || strcmp(accelerator, "NVIDIA_TESLA_A100") != 0)
        return "n1-standard-4";
    /* a2-highgpu-Ng carries N A100s; an invalid count gets the next size up
     * and the catalog then names the valid counts */
    if (count <= 1) return "a2-highgpu-1g";
    if (count <= 2) return "a2-highgpu-2g";
    if (count <= 4) return "a2-highgpu-4g";
    if (count <= 8) return "a2-highgpu-8g";
    return "a2-megagpu-16g";
}

/* ---- the flag table ---- */

typedef enum flag_kind {
    FK_STRING,       /* any non-empty string */
    FK_BOOL,         /* no value */
    FK_COUNT,        /* int64 >= 0 */
    FK_ACCEL,        /* count=N,type=T */
    FK_LABELS,       /* k=v,k2=v2 */
    FK_LIST,         /* a,b,c */
    FK_FORMAT,       /* json | yaml | table */
    FK_SCALE_TIER,   /* basic-gpu or BASIC_GPU */
    FK_JOB_DIR,      /* absolute path or scheme://..., no '..' */
    FK_PACKAGE_PATH, /* a local directory -> file:// URI */
} flag_kind;

typedef enum flag_target {
    FT_NONE,        /* not a job field (input files, output format, ...) */
    FT_INPUT_STR,   /* a char* of kiln_training_input at job_off */
    FT_INPUT_COUNT, /* an int64_t of kiln_training_input at job_off */
    FT_ACCEL,       /* role's acceleratorConfig */
    FT_IMAGE,       /* role's imageUri */
    FT_LABELS,      /* job labels, merged */
    FT_PACKAGES,    /* packageUris (both package flags together) */
} flag_target;

#define NO_OFF SIZE_MAX

typedef struct flag_def {
    const char *name; /* without the leading "--" */
    flag_kind kind;
    size_t arg_off; /* value slot in kiln_submit_args */
    size_t has_off; /* its has_* bool, NO_OFF when the slot is a char* */
    flag_target target;
    size_t job_off; /* FT_INPUT_*: offset in kiln_training_input */
    kiln_role role; /* FT_ACCEL, FT_IMAGE */
} flag_def;

#define A(f)  offsetof(kiln_submit_args, f)
#define TI(f) offsetof(kiln_training_input, f)
#define ARG(name, kind, f)                                                                         \
    {                                                                                              \
        name, kind, A(f), NO_OFF, FT_NONE, NO_OFF, KILN_ROLE_MASTER                                \
    }
#define STR(name, kind, f, tf)                                                                     \
    {                                                                                              \
        name, kind, A(f), NO_OFF, FT_INPUT_STR, TI(tf), KILN_ROLE_MASTER                           \
    }
#define COUNT(name, f, tf)                                                                         \
    {                                                                                              \
        name, FK_COUNT, A(f), A(has_##f), FT_INPUT_COUNT, TI(tf), KILN_ROLE_MASTER                 \
    }
#define ACCEL(name, f, role)                                                                       \
    {                                                                                              \
        name, FK_ACCEL, A(f), A(has_##f), FT_ACCEL, NO_OFF, role                                   \
    }
#define IMAGE(name, f, role)                                                                       \
    {                                                                                              \
        name, FK_STRING, A(f), NO_OFF, FT_IMAGE, NO_OFF, role                                      \
    }

static const flag_def flags[] = {
    ARG("config", FK_STRING, config_path),
    ARG("tfjob", FK_STRING, tfjob_path),
    /* the clearer name: the file may hold a TFJob or a PyTorchJob */
    ARG("kubeflow-job", FK_STRING, tfjob_path),
    ARG("catalog", FK_STRING, catalog_path),
    ARG("runtimes-dir", FK_STRING, runtimes_dir),
    ARG("format", FK_FORMAT, format),
    {"stream-logs", FK_BOOL, A(stream_logs), NO_OFF, FT_NONE, NO_OFF, KILN_ROLE_MASTER},
    {"async", FK_BOOL, A(async), NO_OFF, FT_NONE, NO_OFF, KILN_ROLE_MASTER},
    STR("scale-tier", FK_SCALE_TIER, scale_tier, scale_tier),
    STR("master-machine-type", FK_STRING, master_type, master_type),
    STR("worker-machine-type", FK_STRING, worker_type, worker_type),
    STR("parameter-server-machine-type", FK_STRING, parameter_server_type, parameter_server_type),
    STR("evaluator-machine-type", FK_STRING, evaluator_type, evaluator_type),
    COUNT("worker-count", worker_count, worker_count),
    COUNT("parameter-server-count", parameter_server_count, parameter_server_count),
    COUNT("evaluator-count", evaluator_count, evaluator_count),
    ACCEL("master-accelerator", master_accelerator, KILN_ROLE_MASTER),
    ACCEL("worker-accelerator", worker_accelerator, KILN_ROLE_WORKER),
    ACCEL("parameter-server-accelerator", parameter_server_accelerator, KILN_ROLE_PARAMETER_SERVER),
    ACCEL("evaluator-accelerator", evaluator_accelerator, KILN_ROLE_EVALUATOR),
    IMAGE("master-image-uri", master_image_uri, KILN_ROLE_MASTER),
    IMAGE("worker-image-uri", worker_image_uri, KILN_ROLE_WORKER),
    IMAGE("parameter-server-image-uri", parameter_server_image_uri, KILN_ROLE_PARAMETER_SERVER),
    IMAGE("evaluator-image-uri", evaluator_image_uri, KILN_ROLE_EVALUATOR),
    STR("job-dir", FK_JOB_DIR, job_dir, job_dir),
    STR("region", FK_STRING, region, region),
    STR("module-name", FK_STRING, python_module, python_module),
    {"package-path", FK_PACKAGE_PATH, A(package_path), NO_OFF, FT_PACKAGES, NO_OFF,
     KILN_ROLE_MASTER},
    {"packages", FK_LIST, A(packages), A(has_packages), FT_PACKAGES, NO_OFF, KILN_ROLE_MASTER},
    STR("runtime-version", FK_STRING, runtime_version, runtime_version),
    STR("python-version", FK_STRING, python_version, python_version),
    {"labels", FK_LABELS, A(labels), A(has_labels), FT_LABELS, NO_OFF, KILN_ROLE_MASTER},
};
#define NFLAGS (sizeof flags / sizeof *flags)

/* Slots are found through the table's offsets; these keep the casts in one place. */
#define SLOT(base, off, type)  ((type *)(void *)((char *)(base) + (off)))
#define CSLOT(base, off, type) ((const type *)(const void *)((const char *)(base) + (off)))

static bool given(const flag_def *f, const kiln_submit_args *a)
{
    if (f->has_off != NO_OFF) return *CSLOT(a, f->has_off, bool);
    if (f->kind == FK_BOOL) return *CSLOT(a, f->arg_off, bool);
    return *CSLOT(a, f->arg_off, char *) != NULL;
}

/* ---- reading one flag's value ---- */

typedef struct parse_ctx {
    kiln_submit_args *a;
    kiln_diag *d;
    const char *flag; /* "--worker-count", for messages */
    kiln_err err;     /* KILN_EINVAL after a bad value, KILN_ENOMEM wins */
} parse_ctx;

static void fail(parse_ctx *c, kiln_err e)
{
    if (c->err != KILN_ENOMEM) c->err = e;
}

static void bad_value(parse_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bad_value(parse_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_diag_addv(c->d, c->flag, fmt, ap);
    va_end(ap);
    fail(c, KILN_EINVAL);
}

/* Replaces a char* slot (last flag wins). Takes ownership of `s`. */
static void put_str(parse_ctx *c, char **slot, char *s)
{
    if (s == NULL) {
        fail(c, KILN_ENOMEM);
        return;
    }
    free(*slot);
    *slot = s;
}

/* Calls `item` for each comma-separated piece of `val` (pieces are copied, so
 * `item` may keep them NUL-terminated). Empty pieces are reported. */
static void each_item(parse_ctx *c, const char *val, void (*item)(parse_ctx *, char *, void *),
                      void *arg)
{
    char *copy = strdup(val);
    if (copy == NULL) {
        fail(c, KILN_ENOMEM);
        return;
    }
    char *p = copy;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (*p == '\0')
            bad_value(c, "'%s' has an empty item between commas", val);
        else
            item(c, p, arg);
        if (comma == NULL) break;
        p = comma + 1;
    }
    free(copy);
}

static void parse_count(parse_ctx *c, const flag_def *f, const char *val)
{
    int64_t n;
    if (!kiln__parse_i64(val, &n) || n < 0) {
        bad_value(c, "'%s' is not a count: give a whole number, 0 or more", val);
        return;
    }
    *SLOT(c->a, f->arg_off, int64_t) = n;
    *SLOT(c->a, f->has_off, bool) = true;
}

typedef struct accel_state {
    kiln_accelerator_config *ac;
    bool seen_count, seen_type;
} accel_state;

static void accel_item(parse_ctx *c, char *item, void *arg)
{
    accel_state *st = arg;
    char *eq = strchr(item, '=');
    if (eq == NULL) {
        bad_value(c, "'%s' is not key=value; use count=N,type=TYPE", item);
        return;
    }
    *eq = '\0';
    const char *v = eq + 1;
    bool is_count = strcmp(item, "count") == 0;
    if (!is_count && strcmp(item, "type") != 0) {
        bad_value(c, "unknown key '%s'; the keys are count and type", item);
        return;
    }
    if (is_count ? st->seen_count : st->seen_type) {
        bad_value(c, "'%s' is given twice", item);
        return;
    }
    if (is_count) {
        st->seen_count = true;
        if (!kiln__parse_i64(v, &st->ac->count) || st->ac->count < 1)
            bad_value(c, "count=%s is not a number of accelerators (1 or more)", v);
        return;
    }
    st->seen_type = true;
    char *t = kiln__accelerator_enum(v);
    if (t == NULL) bad_value(c, "type=%s is not an accelerator type such as nvidia-tesla-t4", v);
    free(st->ac->type);
    st->ac->type = t;
}

static void parse_accel(parse_ctx *c, const flag_def *f, const char *val)
{
    kiln_accelerator_config *ac = SLOT(c->a, f->arg_off, kiln_accelerator_config);
    free(ac->type);
    *ac = (kiln_accelerator_config){.count = 1}; /* gcloud's default count */
    accel_state st = {.ac = ac};
    each_item(c, val, accel_item, &st);
    /* count=N alone: N GPUs of any one model, as nvidia.com/gpu asks (the
     * scheduler picks the model); a type alone is gcloud's 1 of that type */
    if (!st.seen_type && !st.seen_count)
        bad_value(c, "'%s' names no accelerators; use count=N,type=TYPE or count=N", val);
    *SLOT(c->a, f->has_off, bool) = true;
}

static void label_item(parse_ctx *c, char *item, void *arg)
{
    char *eq = strchr(item, '=');
    if (eq == NULL || eq == item) {
        bad_value(c, "'%s' is not a label; use KEY=VALUE", item);
        return;
    }
    *eq = '\0';
    if (kiln_map_set(arg, item, eq + 1) != KILN_OK) fail(c, KILN_ENOMEM);
}

static void list_item(parse_ctx *c, char *item, void *arg)
{
    if (kiln_strv_push(arg, item) != KILN_OK) fail(c, KILN_ENOMEM);
}

static void parse_scale_tier(parse_ctx *c, const flag_def *f, const char *val)
{
    static const char *const tiers[] = {"BASIC",     "STANDARD_1", "PREMIUM_1",
                                        "BASIC_GPU", "BASIC_TPU",  "CUSTOM"};
    char *t = kiln__accelerator_enum(val); /* same spelling rule: basic-gpu -> BASIC_GPU */
    for (size_t i = 0; t && i < sizeof tiers / sizeof *tiers; i++)
        if (strcmp(t, tiers[i]) == 0) {
            put_str(c, SLOT(c->a, f->arg_off, char *), t);
            return;
        }
    free(t);
    bad_value(c,
              "'%s' is not a scale tier; use basic, standard-1, premium-1, basic-gpu, "
              "basic-tpu or custom",
              val);
}

static void parse_format(parse_ctx *c, const flag_def *f, const char *val)
{
    if (strcmp(val, "json") != 0 && strcmp(val, "yaml") != 0 && strcmp(val, "table") != 0) {
        bad_value(c, "'%s' is not an output format; use json, yaml or table", val);
        return;
    }
    put_str(c, SLOT(c->a, f->arg_off, char *), strdup(val));
}

/* scheme://... with an RFC 3986 scheme */
static bool has_uri_scheme(const char *s)
{
    if (!isalpha((unsigned char)*s)) return false;
    while (isalnum((unsigned char)*s) || *s == '+' || *s == '-' || *s == '.')
        s++;
    return strncmp(s, "://", 3) == 0 && s[3] != '\0';
}

static bool has_dotdot_segment(const char *s)
{
    for (const char *p = s; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == s || p[-1] == '/') && (p[2] == '\0' || p[2] == '/')) return true;
    return false;
}

static void parse_job_dir(parse_ctx *c, const flag_def *f, const char *val)
{
    for (const char *p = val; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            bad_value(c, "the job dir has a control character");
            return;
        }
    if (val[0] != '/' && !has_uri_scheme(val)) {
        bad_value(c, "'%s' is neither an absolute path nor a URI (scheme://...)", val);
        return;
    }
    if (has_dotdot_segment(val)) {
        bad_value(c, "'%s' has a '..' segment; give the directory itself", val);
        return;
    }
    put_str(c, SLOT(c->a, f->arg_off, char *), strdup(val));
}

/* file:// + the absolute path, with bytes outside RFC 3986's path characters
 * percent-encoded so that the URI stays one token. */
static char *file_uri(const char *abs)
{
    static const char keep[] = "/-._~!$&'()*+,;=:@";
    size_t n = strlen(abs);
    char *out = malloc(sizeof "file://" + 3 * n);
    if (out == NULL) return NULL;
    char *o = out + sprintf(out, "file://");
    for (const unsigned char *p = (const unsigned char *)abs; *p; p++) {
        if (isalnum(*p) || strchr(keep, *p))
            *o++ = (char)*p;
        else
            o += sprintf(o, "%%%02X", *p);
    }
    *o = '\0';
    return out;
}

static void parse_package_path(parse_ctx *c, const flag_def *f, const char *val)
{
    char *abs = realpath(val, NULL);
    struct stat st;
    if (abs == NULL || stat(abs, &st) != 0 || !S_ISDIR(st.st_mode)) {
        bad_value(c, "'%s' is not a directory%s%s", val, abs ? "" : ": ",
                  abs ? "" : strerror(errno));
        free(abs);
        return;
    }
    put_str(c, SLOT(c->a, f->arg_off, char *), file_uri(abs));
    free(abs);
}

static void usage_error(parse_ctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void parse_value(parse_ctx *c, const flag_def *f, const char *val)
{
    switch (f->kind) {
    case FK_BOOL:
        *SLOT(c->a, f->arg_off, bool) = true;
        break;
    case FK_STRING:
        /* --tfjob and --kubeflow-job fill one slot: two files would leave
         * one silently unread */
        if (f->arg_off == A(tfjob_path) && c->a->tfjob_path) {
            usage_error(c, "--kubeflow-job",
                        "a Kubeflow job file is already given ('%.64s'): give one file",
                        c->a->tfjob_path);
            break;
        }
        put_str(c, SLOT(c->a, f->arg_off, char *), strdup(val));
        break;
    case FK_COUNT:
        parse_count(c, f, val);
        break;
    case FK_ACCEL:
        parse_accel(c, f, val);
        break;
    case FK_LABELS:
        kiln_map_clear(SLOT(c->a, f->arg_off, kiln_map));
        each_item(c, val, label_item, SLOT(c->a, f->arg_off, kiln_map));
        *SLOT(c->a, f->has_off, bool) = true;
        break;
    case FK_LIST:
        kiln_strv_clear(SLOT(c->a, f->arg_off, kiln_strv));
        each_item(c, val, list_item, SLOT(c->a, f->arg_off, kiln_strv));
        *SLOT(c->a, f->has_off, bool) = true;
        break;
    case FK_FORMAT:
        parse_format(c, f, val);
        break;
    case FK_SCALE_TIER:
        parse_scale_tier(c, f, val);
        break;
    case FK_JOB_DIR:
        parse_job_dir(c, f, val);
        break;
    case FK_PACKAGE_PATH:
        parse_package_path(c, f, val);
        break;
    }
}

/* ---- the command line ---- */

/* Longer names are cut in messages: no flag is near that long. */
#define FLAG_NAME_MAX 48

static const flag_def *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < NFLAGS; i++)
        if (strlen(flags[i].name) == len && memcmp(flags[i].name, name, len) == 0) return &flags[i];
    return NULL;
}

/* "did you mean": the closest flag name, or NULL when none is close. */
static const char *closest_flag(const char *name, size_t len)
{
    const char *names[NFLAGS];
    char word[FLAG_NAME_MAX + 1];
    for (size_t i = 0; i < NFLAGS; i++)
        names[i] = flags[i].name;
    snprintf(word, sizeof word, "%.*s",
             (int)kiln__utf8_cut(name, len > FLAG_NAME_MAX ? FLAG_NAME_MAX : len), name);
    return kiln__suggest(word, names, NFLAGS);
}

static void usage_error(parse_ctx *c, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_diag_addv(c->d, field, fmt, ap);
    va_end(ap);
    c->a->usage_errors++;
    fail(c, KILN_EINVAL);
}

/* Handles argv[*i], a "--name" or "--name=value" argument; may consume the next one. */
static void parse_flag(parse_ctx *c, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    char field[FLAG_NAME_MAX + 8];
    snprintf(field, sizeof field, "--%.*s",
             (int)kiln__utf8_cut(name, len > FLAG_NAME_MAX ? FLAG_NAME_MAX : len), name);

    const flag_def *f = find_flag(name, len);
    if (f == NULL) {
        const char *near = closest_flag(name, len);
        if (near)
            usage_error(c, field, "unknown flag; did you mean --%s?", near);
        else
            usage_error(c, field, "unknown flag; --help lists the flags");
        return;
    }
    c->flag = field;
    if (f->kind == FK_BOOL) {
        if (eq)
            usage_error(c, field, "takes no value");
        else
            parse_value(c, f, NULL);
        return;
    }
    const char *val = NULL;
    if (eq)
        val = eq + 1;
    else if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0)
        val = argv[++*i];
    if (val == NULL || *val == '\0') {
        usage_error(c, field, "needs a value");
        return;
    }
    parse_value(c, f, val);
}

/* A Job is JSON, so its strings must be UTF-8: reject other bytes up front,
 * before any of them can reach a message or a field. */
static bool all_utf8(parse_ctx *c, int argc, char **argv)
{
    bool ok = true;
    for (int i = 0; i < argc; i++)
        if (argv[i] && !kiln__utf8_valid(argv[i])) {
            usage_error(c, "", "argument %d is not valid UTF-8", i + 1);
            ok = false;
        }
    return ok;
}

kiln_err kiln_submit_parse(int argc, char **argv, kiln_submit_args *out, kiln_diag *d)
{
    *out = (kiln_submit_args){0};
    parse_ctx c = {.a = out, .d = d, .err = KILN_OK};
    if (!all_utf8(&c, argc, argv)) return c.err;
    for (int i = 0; i < argc && c.err != KILN_ENOMEM; i++) {
        const char *arg = argv[i] ? argv[i] : "";
        if (strcmp(arg, "--") == 0) {
            /* everything after a bare `--` belongs to the program, as written */
            out->has_user_args = true;
            for (i++; i < argc; i++)
                if (kiln_strv_push(&out->user_args, argv[i] ? argv[i] : "") != KILN_OK)
                    fail(&c, KILN_ENOMEM);
            break;
        }
        if (strncmp(arg, "--", 2) == 0) {
            parse_flag(&c, argc, argv, &i);
        } else if (arg[0] == '-' && arg[1] != '\0') {
            usage_error(&c, "", "'%.*s': short options are not supported; flags start with --",
                        (int)kiln__utf8_cut(arg, 64), arg);
        } else if (out->job_id == NULL) {
            put_str(&c, &out->job_id, strdup(arg));
        } else {
            usage_error(&c, "",
                        "unexpected argument '%.*s': the job ID is already '%.*s' "
                        "(program arguments go after --)",
                        (int)kiln__utf8_cut(arg, 64), arg, (int)kiln__utf8_cut(out->job_id, 64),
                        out->job_id);
        }
    }
    if (out->config_path && out->tfjob_path)
        usage_error(&c, "--tfjob", "cannot be combined with --config: give one input file");
    return c.err;
}

void kiln_submit_args_free(kiln_submit_args *a)
{
    if (a == NULL) return;
    free(a->job_id);
    for (size_t i = 0; i < NFLAGS; i++) {
        const flag_def *f = &flags[i];
        switch (f->kind) {
        case FK_BOOL:
        case FK_COUNT:
            break;
        case FK_ACCEL:
            free(SLOT(a, f->arg_off, kiln_accelerator_config)->type);
            break;
        case FK_LABELS:
            kiln_map_clear(SLOT(a, f->arg_off, kiln_map));
            break;
        case FK_LIST:
            kiln_strv_clear(SLOT(a, f->arg_off, kiln_strv));
            break;
        default: {
            /* NULL after: --tfjob and --kubeflow-job share one slot */
            char **slot = SLOT(a, f->arg_off, char *);
            free(*slot);
            *slot = NULL;
            break;
        }
        }
    }
    kiln_strv_clear(&a->user_args);
    *a = (kiln_submit_args){0};
}

/* ---- reading input files ---- */

kiln_err kiln_read_input(const char *path, const char *field, char **buf, size_t *len, kiln_diag *d)
{
    /* "-" reads standard input, so a job can be piped in */
    const char *real = strcmp(path, "-") == 0 ? "/dev/stdin" : path;
    *buf = NULL;
    *len = 0;
    errno = 0;
    kiln_err err = kiln__read_file(real, KILN_SPEC_MAX_BYTES, buf, len);
    if (err == KILN_ELIMIT)
        kiln_diag_add(d, field, "'%s' is larger than the %u-byte limit", path,
                      (unsigned)KILN_SPEC_MAX_BYTES);
    else if (err == KILN_EIO)
        kiln_diag_add(d, field, "cannot read '%s': %s", path,
                      errno ? strerror(errno) : "I/O error");
    return err;
}

/* ---- flags over the job ---- */

static kiln_err apply_accel(const kiln_accelerator_config *src, kiln_training_input *ti,
                            kiln_role role)
{
    kiln_role_fields f = kiln_job_role_fields(ti, role);
    *f.has_config = true;
    f.config->has_accelerator_config = true;
    f.config->accelerator_config.count = src->count;
    return kiln_set_str(&f.config->accelerator_config.type, src->type);
}

static kiln_err apply_image(const char *uri, kiln_training_input *ti, kiln_role role)
{
    kiln_role_fields f = kiln_job_role_fields(ti, role);
    *f.has_config = true;
    return kiln_set_str(&f.config->image_uri, uri);
}

static kiln_err apply_labels(const kiln_map *src, kiln_job *job)
{
    for (size_t i = 0; i < src->n; i++) {
        kiln_err err = kiln_map_set(&job->labels, src->keys[i], src->vals[i]);
        if (err != KILN_OK) return err;
    }
    return KILN_OK;
}

/* --package-path (its file:// URI) first, then --packages. */
static kiln_err apply_packages(const kiln_submit_args *a, kiln_training_input *ti)
{
    kiln_err err = KILN_OK;
    kiln_strv_clear(&ti->package_uris);
    if (a->package_path) err = kiln_strv_push(&ti->package_uris, a->package_path);
    for (size_t i = 0; err == KILN_OK && i < a->packages.n; i++)
        err = kiln_strv_push(&ti->package_uris, a->packages.v[i]);
    return err;
}

static kiln_err apply_flag(const flag_def *f, const kiln_submit_args *a, kiln_job *job)
{
    kiln_training_input *ti = &job->training_input;
    switch (f->target) {
    case FT_NONE:
        return KILN_OK;
    case FT_INPUT_STR:
        job->has_training_input = true;
        return kiln_set_str(SLOT(ti, f->job_off, char *), *CSLOT(a, f->arg_off, char *));
    case FT_INPUT_COUNT:
        job->has_training_input = true;
        *SLOT(ti, f->job_off, int64_t) = *CSLOT(a, f->arg_off, int64_t);
        return KILN_OK;
    case FT_ACCEL:
        job->has_training_input = true;
        return apply_accel(CSLOT(a, f->arg_off, kiln_accelerator_config), ti, f->role);
    case FT_IMAGE:
        job->has_training_input = true;
        return apply_image(*CSLOT(a, f->arg_off, char *), ti, f->role);
    case FT_LABELS:
        return apply_labels(CSLOT(a, f->arg_off, kiln_map), job);
    case FT_PACKAGES:
        job->has_training_input = true;
        return apply_packages(a, ti);
    }
    return KILN_EINTERNAL;
}

static kiln_err apply_all(const kiln_submit_args *a, kiln_job *job)
{
    kiln_err err = KILN_OK;
    for (size_t i = 0; err == KILN_OK && i < NFLAGS; i++)
        if (given(&flags[i], a)) err = apply_flag(&flags[i], a, job);
    if (err == KILN_OK && a->job_id) err = kiln_set_str(&job->job_id, a->job_id);
    if (err == KILN_OK && a->has_user_args) {
        job->has_training_input = true;
        kiln_strv_clear(&job->training_input.args);
        for (size_t i = 0; err == KILN_OK && i < a->user_args.n; i++)
            err = kiln_strv_push(&job->training_input.args, a->user_args.v[i]);
    }
    return err;
}

static kiln_err load_file(const kiln_submit_args *a, kiln_job **job, kiln_diag *d, kiln_diag *notes)
{
    bool tf = a->tfjob_path != NULL;
    const char *path = tf ? a->tfjob_path : a->config_path;
    char *buf = NULL;
    size_t len = 0;
    kiln_err err = kiln_read_input(path, tf ? "--tfjob" : "--config", &buf, &len, d);
    if (err == KILN_OK)
        err = tf ? kiln_job_from_kubeflow_in(buf, len, job, d, notes, a->runtimes_dir)
                 : kiln_job_from_yaml(buf, len, job, d);
    free(buf);
    return err;
}

kiln_err kiln_submit_build(const kiln_submit_args *a, kiln_job **out, kiln_diag *d)
{
    return kiln_submit_build_notes(a, out, d, NULL);
}

kiln_err kiln_submit_build_notes(const kiln_submit_args *a, kiln_job **out, kiln_diag *d,
                                 kiln_diag *notes)
{
    kiln_err err = KILN_OK;
    kiln_job *job = NULL;

    *out = NULL;
    if (a->config_path && a->tfjob_path) {
        kiln_diag_add(d, "--tfjob", "cannot be combined with --config: give one input file");
        return KILN_EINVAL;
    }
    if (a->config_path || a->tfjob_path) {
        err = load_file(a, &job, d, notes);
        if (err != KILN_OK) goto out;
    } else if ((job = kiln_job_new()) == NULL) {
        err = KILN_ENOMEM;
        goto out;
    }
    err = apply_all(a, job);
    if (err != KILN_OK) goto out;
    *out = job;
    job = NULL;
out:
    kiln_job_free(job);
    return err;
}

kiln_err kiln_job_program_args(const kiln_job *job, kiln_strv *out)
{
    kiln_err err = KILN_OK;
    kiln_strv_clear(out);
    if (!job->has_training_input) return KILN_OK;
    const kiln_training_input *ti = &job->training_input;
    for (size_t i = 0; err == KILN_OK && i < ti->args.n; i++)
        err = kiln_strv_push(out, ti->args.v[i]);
    /* the service passes the job dir to the program as well (facts §6) */
    if (err == KILN_OK && ti->job_dir && *ti->job_dir) {
        err = kiln_strv_push(out, "--job-dir");
        if (err == KILN_OK) err = kiln_strv_push(out, ti->job_dir);
    }
    if (err != KILN_OK) kiln_strv_clear(out);
    return err;
}

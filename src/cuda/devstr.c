/* cuda/devstr.c - TensorFlow-style device strings ("/gpu:1",
 * "/device:GPU:1", "/cpu:0"). Plain C, built with or without CUDA, so that
 * flags are validated the same way everywhere. */
#include "kiln/cuda.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_DEVICE_INDEX 1023

/* Matches `word` case-insensitively at *p and advances past it. */
static int eat(const char **p, const char *word)
{
    size_t n = strlen(word);
    if (strncasecmp(*p, word, n) != 0) return 0;
    *p += n;
    return 1;
}

kiln_err kiln_device_parse(const char *s, kiln_device_spec *out, char *err, size_t errlen)
{
    const char *p = s;
    kiln_device_spec d = {KILN_DEVICE_CPU, 0};

    if (!s || !*s) {
        snprintf(err, errlen, "empty device string (expected /gpu:N or /cpu:0)");
        return KILN_EINVAL;
    }
    if (*p == '/') p++;
    (void)eat(&p, "device:"); /* "/device:GPU:0": the type follows */
    if (eat(&p, "gpu"))
        d.kind = KILN_DEVICE_GPU;
    else if (!eat(&p, "cpu")) {
        snprintf(err, errlen, "device '%s': unknown device type (expected /gpu:N or /cpu:0)", s);
        return KILN_EINVAL;
    }
    if (*p == ':') {
        p++;
        if (!isdigit((unsigned char)*p)) {
            snprintf(err, errlen, "device '%s': the index must be a decimal number", s);
            return KILN_EINVAL;
        }
        long v = 0;
        while (isdigit((unsigned char)*p)) {
            v = v * 10 + (*p++ - '0');
            if (v > MAX_DEVICE_INDEX) {
                snprintf(err, errlen, "device '%s': index out of range (0..%d)", s,
                         MAX_DEVICE_INDEX);
                return KILN_EINVAL;
            }
        }
        d.index = (int)v;
    }
    if (*p) {
        snprintf(err, errlen, "device '%s': unexpected text after the device index", s);
        return KILN_EINVAL;
    }
    if (d.kind == KILN_DEVICE_CPU && d.index != 0) {
        snprintf(err, errlen, "device '%s': only /cpu:0 exists (the CPU ops use all cores)", s);
        return KILN_EINVAL;
    }
    *out = d;
    return KILN_OK;
}

const char *kiln_device_format(const kiln_device_spec *d, char *buf, size_t len)
{
    snprintf(buf, len, "/%s:%d", d->kind == KILN_DEVICE_GPU ? "gpu" : "cpu", d->index);
    return buf;
}

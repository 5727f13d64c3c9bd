/* tests/cuda/test_cuda_devstr.c - TensorFlow-style device strings
 * (kiln_device_parse) and the dynamic loss-scale policy: plain C, so these
 * run in every build, with or without CUDA. */
#include "cuda/lossscale.h"
#include "kiln/cuda.h"
#include "test.h"

#include <string.h>

static void ok(const char *s, kiln_device_kind kind, int index, const char *canon)
{
    kiln_device_spec d = {KILN_DEVICE_CPU, -1};
    char err[256] = "", buf[32];
    kiln_err e = kiln_device_parse(s, &d, err, sizeof err);
    CHECK_MSG(e == KILN_OK, "'%s' rejected: %s", s, err);
    CHECK_MSG(d.kind == kind && d.index == index, "'%s' -> kind %d index %d", s, d.kind, d.index);
    CHECK_STR(kiln_device_format(&d, buf, sizeof buf), canon);
}

static void bad(const char *s, const char *needle)
{
    kiln_device_spec d = {KILN_DEVICE_GPU, 7};
    char err[256] = "";
    kiln_err e = kiln_device_parse(s, &d, err, sizeof err);
    CHECK_MSG(e == KILN_EINVAL, "'%s' accepted", s ? s : "(null)");
    CHECK_MSG(strstr(err, needle) != NULL, "'%s': message '%s' lacks '%s'", s ? s : "(null)", err,
              needle);
    CHECK_MSG(d.kind == KILN_DEVICE_GPU && d.index == 7, "'%s': output touched on error", s);
}

static void devstr(void)
{
    ok("/gpu:0", KILN_DEVICE_GPU, 0, "/gpu:0");
    ok("/gpu:1", KILN_DEVICE_GPU, 1, "/gpu:1");
    ok("gpu:3", KILN_DEVICE_GPU, 3, "/gpu:3");
    ok("/device:GPU:2", KILN_DEVICE_GPU, 2, "/gpu:2");
    ok("device:gpu:12", KILN_DEVICE_GPU, 12, "/gpu:12");
    ok("/GPU:0", KILN_DEVICE_GPU, 0, "/gpu:0");
    ok("gpu", KILN_DEVICE_GPU, 0, "/gpu:0");
    ok("/cpu:0", KILN_DEVICE_CPU, 0, "/cpu:0");
    ok("/device:CPU:0", KILN_DEVICE_CPU, 0, "/cpu:0");
    ok("cpu", KILN_DEVICE_CPU, 0, "/cpu:0");
    ok("/gpu:1023", KILN_DEVICE_GPU, 1023, "/gpu:1023");

    bad(NULL, "empty");
    bad("", "empty");
    bad("/tpu:0", "unknown device type");
    bad("/gpu:", "decimal");
    bad("/gpu:x", "decimal");
    bad("/gpu:-1", "decimal");
    bad("/gpu:1024", "out of range");
    bad("/gpu:99999999999999999999", "out of range");
    bad("/gpu:1a", "unexpected text");
    bad("/gpu:0 ", "unexpected text");
    bad("/gpu0", "unexpected text");
    bad("/cpu:1", "only /cpu:0");
    bad("/device:TPU:0", "unknown device type");
}

static void lossscale(void)
{
    kiln_loss_scaler s;
    kiln_loss_scaler_init(&s);
    CHECK(s.scale == 65536.0f && s.growth_interval == 2000);

    /* an overflow: skip the step, halve */
    CHECK(kiln_loss_scaler_update(&s, 1) == 0);
    CHECK(s.scale == 32768.0f && s.skipped == 1 && s.good_steps == 0);
    /* growth only after growth_interval finite steps in a row */
    for (int i = 0; i < 1999; i++)
        CHECK(kiln_loss_scaler_update(&s, 0) == 1);
    CHECK(s.scale == 32768.0f && s.good_steps == 1999);
    CHECK(kiln_loss_scaler_update(&s, 0) == 1);
    CHECK(s.scale == 65536.0f && s.good_steps == 0);
    /* an overflow resets the run of good steps */
    s.good_steps = 1500;
    CHECK(kiln_loss_scaler_update(&s, 1) == 0);
    CHECK(s.good_steps == 0 && s.scale == 32768.0f);
    /* bounded: never 0, never inf */
    for (int i = 0; i < 200; i++)
        kiln_loss_scaler_update(&s, 1);
    CHECK(s.scale == s.min_scale && s.scale > 0.0f);
    s.growth_interval = 1;
    for (int i = 0; i < 200; i++)
        kiln_loss_scaler_update(&s, 0);
    CHECK(s.scale == s.max_scale);
    CHECK(s.skipped == 202);
}

int main(void)
{
    devstr();
    lossscale();
    TEST_DONE();
}

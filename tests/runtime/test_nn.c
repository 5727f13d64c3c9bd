/* tests/runtime/test_nn.c - the model API end to end on a slice of
 * Fashion-MNIST: learning (loss falls, accuracy far above chance),
 * determinism (same seed -> bit-identical parameters), stop-and-resume
 * through fit's initial_epoch/initial_step (bit-identical to one run), a
 * small CNN with every layer kind, and API errors. */
#include "kiln/train.h"
#include "nn/nn.h"
#include "rt_test.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

static kiln_data train, test;

static kiln_model *mlp(uint64_t seed, int batch)
{
    kiln_model *m = kiln_model_new(28, 28, 1);
    kiln_model_add(m, kiln_flatten());
    kiln_model_add(m, kiln_dense(64, KILN_RELU));
    kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    if (kiln_model_compile(m, kiln_sgd(0.05f, 0.9f), KILN_SOFTMAX_XENT, batch, seed)) {
        fprintf(stderr, "compile: %s\n", kiln_model_error(m));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

static int same_params(kiln_model *a, kiln_model *b)
{
    if (kiln_model_num_buffers(a) != kiln_model_num_buffers(b)) return 0;
    for (size_t i = 0; i < kiln_model_num_buffers(a); i++) {
        kiln_buffer x = kiln_model_buffer(a, i), y = kiln_model_buffer(b, i);
        if (x.size != y.size || strcmp(x.name, y.name) || !bits_equal(x.data, y.data, x.size))
            return 0;
    }
    return 1;
}

typedef struct stopper {
    uint64_t stop_at;
    float first_loss, last_loss;
} stopper;

static int on_step(void *ud, kiln_model *m, const kiln_fit_info *in)
{
    stopper *s = ud;
    (void)m;
    if (in->global_step == 1) s->first_loss = in->loss;
    s->last_loss = in->loss;
    return s->stop_at && in->global_step == s->stop_at;
}

int main(void)
{
    kiln_data full = {0}, full_test = {0};
    char err[512];
    if (kiln_load_fashion_mnist(NULL, 1, &full, err, sizeof(err)) ||
        kiln_load_fashion_mnist(NULL, 0, &full_test, err, sizeof(err))) {
        fprintf(stderr, "Fashion-MNIST not available: %s\n", err);
        CHECK(0);
        TEST_DONE();
    }
    size_t ntrain = KILN_HEAVY ? 2000 : 1000, ntest = KILN_HEAVY ? 1000 : 500;
    train = (kiln_data){.x = full.x, .y = full.y, .n = ntrain, .dim = full.dim};
    test = (kiln_data){.x = full_test.x, .y = full_test.y, .n = ntest, .dim = full_test.dim};
    kiln_set_threads(2);

    /* learning */
    kiln_model *a = mlp(1, 32);
    CHECK(a != NULL);
    float acc0 = 0, acc1 = 0, l0 = 0, l1 = 0;
    kiln_model_evaluate(a, test.x, test.y, test.n, &l0, &acc0);
    stopper s1 = {0};
    kiln_fit_opts fo = {.epochs = 3, .shuffle_seed = 9};
    kiln_callbacks cb = {.ud = &s1, .on_step_end = on_step};
    CHECK(kiln_model_fit(a, &train, &fo, &cb) == 0);
    kiln_model_evaluate(a, test.x, test.y, test.n, &l1, &acc1);
    printf("slice: test loss %.3f -> %.3f, accuracy %.3f -> %.3f\n", l0, l1, acc0, acc1);
    CHECK_MSG(l1 < 0.6f * l0, "loss %.3f -> %.3f", l0, l1);
    CHECK_MSG(acc1 > 0.65f, "accuracy %.3f after 3 epochs on the slice", acc1);
    CHECK(s1.last_loss < s1.first_loss);
    uint64_t steps_total = kiln_model_step(a);
    CHECK(steps_total == 3 * ((ntrain + 31) / 32));

    /* determinism: same seed, same data order -> the same bits */
    kiln_model *b = mlp(1, 32);
    stopper s2 = {0};
    cb.ud = &s2;
    CHECK(kiln_model_fit(b, &train, &fo, &cb) == 0);
    CHECK(same_params(a, b));
    kiln_model *other = mlp(2, 32);
    CHECK(!same_params(b, other)); /* and a different seed differs */

    /* stop after 25 steps, copy state into a fresh model, resume: same bits */
    kiln_model *c = mlp(1, 32), *d = mlp(1, 32);
    stopper s3 = {.stop_at = 25};
    cb.ud = &s3;
    CHECK(kiln_model_fit(c, &train, &fo, &cb) == 1);
    for (size_t i = 0; i < kiln_model_num_buffers(c); i++) {
        kiln_buffer x = kiln_model_buffer(c, i), y = kiln_model_buffer(d, i);
        memcpy(y.data, x.data, sizeof(float) * x.size);
    }
    kiln_model_set_step(d, kiln_model_step(c));
    uint64_t spe = (ntrain + 31) / 32;
    kiln_fit_opts ro = fo;
    ro.initial_epoch = 25 / spe;
    ro.initial_step = 25 % spe;
    stopper s4 = {0};
    cb.ud = &s4;
    CHECK(kiln_model_fit(d, &train, &ro, &cb) == 0);
    CHECK(kiln_model_step(d) == steps_total);
    CHECK_MSG(same_params(a, d), "resumed run differs from the uninterrupted one");

    /* batches from the prefetch thread or gathered on the pool (nn/fit.c picks
     * by cores): the same batches, so the same bits, also when resuming */
    kiln_model *via[2];
    for (int pool = 0; pool < 2; pool++) {
        kiln__fit_batches_on_pool = pool;
        via[pool] = mlp(1, 32);
        kiln_fit_opts vo = ro; /* mid-epoch start, then whole epochs with a partial last batch */
        CHECK(kiln_model_fit(via[pool], &train, &vo, NULL) == 0);
    }
    kiln__fit_batches_on_pool = -1;
    CHECK_MSG(same_params(via[0], via[1]), "pool-gathered batches differ from prefetched ones");
    CHECK(!same_params(via[0], b)); /* the check can fail: a different start gives other bits */
    kiln_model_free(via[0]), kiln_model_free(via[1]);

    /* a small CNN with every layer kind learns too; Adam */
    kiln_model *cnn = kiln_model_new(28, 28, 1);
    kiln_model_add(cnn, kiln_conv2d(8, 3, 1, KILN_SAME, KILN_LINEAR));
    kiln_model_add(cnn, kiln_batchnorm(0.1f, 1e-5f));
    kiln_model_add(cnn, kiln_relu());
    kiln_model_add(cnn, kiln_maxpool2d(2, 2));
    kiln_model_add(cnn, kiln_conv2d(8, 3, 2, 1, KILN_RELU));
    kiln_model_add(cnn, kiln_avgpool2d(2, 2));
    kiln_model_add(cnn, kiln_flatten());
    kiln_model_add(cnn, kiln_dense(10, KILN_LINEAR));
    CHECK(kiln_model_compile(cnn, kiln_adam(0.005f), KILN_SOFTMAX_XENT, 32, 3) == 0);
    kiln_model_summary(cnn, stdout);
    float cl0, ca0, cl1, ca1;
    kiln_model_evaluate(cnn, test.x, test.y, test.n, &cl0, &ca0);
    kiln_fit_opts co = {.epochs = 2, .shuffle_seed = 1};
    CHECK(kiln_model_fit(cnn, &train, &co, NULL) == 0);
    kiln_model_evaluate(cnn, test.x, test.y, test.n, &cl1, &ca1);
    printf("cnn slice: loss %.3f -> %.3f, accuracy %.3f -> %.3f\n", cl0, cl1, ca0, ca1);
    CHECK(cl1 < cl0 && ca1 > 0.5f);
    int names_ok = 0;
    for (size_t i = 0; i < kiln_model_num_buffers(cnn); i++) {
        kiln_buffer bb = kiln_model_buffer(cnn, i);
        names_ok += strcmp(bb.name, "batch_norm_1/moving_mean") == 0 && !bb.is_param;
        names_ok += strcmp(bb.name, "conv2d_0/kernel/adam_v") == 0 && !bb.is_param;
        names_ok += strcmp(bb.name, "dense_7/bias") == 0 && bb.is_param && bb.size == 10;
    }
    CHECK(names_ok == 3);

    /* errors */
    kiln_model *e = kiln_model_new(4, 4, 1);
    kiln_model_add(e, kiln_conv2d(2, 7, 1, KILN_VALID, KILN_RELU)); /* 7x7 on 4x4 */
    CHECK(kiln_model_compile(e, kiln_sgd(0.1f, 0), KILN_SOFTMAX_XENT, 8, 0) == -1);
    CHECK(strstr(kiln_model_error(e), "conv") != NULL);
    kiln_model_free(e);
    e = mlp(0, 4);
    uint8_t bad[4] = {0, 1, 2, 200};
    CHECK(kiln_model_train_step(e, train.x, bad, 4, NULL, NULL) == -1);
    CHECK(kiln_model_train_step(e, train.x, train.y, 5, NULL, NULL) == -1);
    kiln_data wrong = {.x = train.x, .y = train.y, .n = 10, .dim = 100};
    CHECK(kiln_model_fit(e, &wrong, &fo, NULL) == -1);

    kiln_model_free(a), kiln_model_free(b), kiln_model_free(other), kiln_model_free(c),
        kiln_model_free(d), kiln_model_free(cnn), kiln_model_free(e);
    kiln_data_free(&full);
    kiln_data_free(&full_test);
    TEST_DONE();
}

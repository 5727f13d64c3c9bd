/* examples/custom_model - a custom network on Fashion-MNIST with the kiln
 * runtime's Keras-like API, built against the installed library:
 *     cc main.c $(pkg-config --cflags --libs kiln) -o custom_model */
#include <kiln/train.h>

#include <stdio.h>

static int on_epoch_end(void *ud, kiln_model *m, const kiln_fit_info *in)
{
    const kiln_data *test = ud;
    float loss, acc;
    kiln_model_evaluate(m, test->x, test->y, test->n, &loss, &acc);
    printf("epoch %llu: train loss %.4f, test accuracy %.4f, %.0f samples/s\n",
           (unsigned long long)in->epoch + 1, in->loss, acc, in->samples_per_sec);
    return 0; /* nonzero would stop training */
}

int main(void)
{
    kiln_data train, test;
    char err[512];
    if (kiln_load_fashion_mnist(NULL, 1, &train, err, sizeof(err)) ||
        kiln_load_fashion_mnist(NULL, 0, &test, err, sizeof(err))) {
        fprintf(stderr, "custom_model: %s\n", err);
        return 1;
    }
    /* conv-BN-ReLU, pooling, a dense head: NHWC, 28x28x1 in, 10 logits out */
    kiln_model *m = kiln_model_new(28, 28, 1);
    kiln_model_add(m, kiln_conv2d(16, 3, 1, KILN_SAME, KILN_LINEAR));
    kiln_model_add(m, kiln_batchnorm(0.1f, 1e-5f));
    kiln_model_add(m, kiln_relu());
    kiln_model_add(m, kiln_maxpool2d(2, 2));
    kiln_model_add(m, kiln_conv2d(32, 3, 1, KILN_SAME, KILN_RELU));
    kiln_model_add(m, kiln_avgpool2d(2, 2));
    kiln_model_add(m, kiln_flatten());
    kiln_model_add(m, kiln_dense(128, KILN_RELU));
    kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    if (kiln_model_compile(m, kiln_adam(0.001f), KILN_SOFTMAX_XENT, 128, /*seed=*/42)) {
        fprintf(stderr, "custom_model: %s\n", kiln_model_error(m));
        return 1;
    }
    kiln_model_summary(m, stdout);
    kiln_fit_opts opts = {.epochs = 2, .shuffle_seed = 7};
    kiln_callbacks cb = {.ud = &test, .on_epoch_end = on_epoch_end};
    int rc = kiln_model_fit(m, &train, &opts, &cb) == 0 ? 0 : 1;
    kiln_model_free(m);
    kiln_data_free(&train);
    kiln_data_free(&test);
    return rc;
}

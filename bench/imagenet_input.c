/* bench/imagenet_input.c -> build/bin/kiln-imagenet-input DIR [BATCH=64]
 * [SIZE=224] [THREADS=0] [BATCHES=20]: kiln's ImageNet reader alone
 * (src/runtime/data/imagenet.c: TFRecord files, libjpeg, Inception crops
 * and flips, on THREADS decoding threads; 0 = the machine's cores): the
 * images per second it hands out, after one batch of warm-up. The peer is
 * bench/tf_imagenet_input.py; bench/imagenet_input.sh runs both. */
#include "data/imagenet.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    char err[1024];
    const float *x;
    const int32_t *y;
    if (argc < 2) {
        fprintf(stderr, "usage: kiln-imagenet-input DIR [BATCH=64] [SIZE=224] [THREADS=0] "
                        "[BATCHES=20]\n");
        return 2;
    }
    kiln_imagenet_cfg c = {.dir = argv[1],
                           .split = "train",
                           .batch = argc > 2 ? atoi(argv[2]) : 64,
                           .size = argc > 3 ? atoi(argv[3]) : 224,
                           .threads = argc > 4 ? atoi(argv[4]) : 0,
                           .classes = 100000,
                           .train = 1,
                           .seed = 1};
    int batches = argc > 5 ? atoi(argv[5]) : 20;
    kiln_imagenet *d = kiln_imagenet_open(&c, err, sizeof err);
    if (!d) {
        fprintf(stderr, "kiln-imagenet-input: %s\n", err);
        return 1;
    }
    int rc = kiln_imagenet_next(d, &x, &y, err, sizeof err); /* warm-up */
    double t0 = now();
    for (int b = 0; b < batches && rc == 0; b++)
        rc = kiln_imagenet_next(d, &x, &y, err, sizeof err);
    double secs = now() - t0;
    if (rc == 0)
        printf("kiln images/s: %.1f (%d threads, batch %d, %dx%d, %d batches)\n",
               (double)c.batch * batches / secs, kiln_imagenet_threads(d), c.batch, c.size, c.size,
               batches);
    else
        fprintf(stderr, "kiln-imagenet-input: %s\n", err);
    kiln_imagenet_close(d);
    return rc ? 1 : 0;
}

/* data/imagenet.h - ImageNet-style training data for ResNet-50
 * (kiln-train resnet50 --data_dir): TFRecord files of tf.Example records
 * (data/example.h), as TensorFlow's build_imagenet_data.py writes them and
 * tf_cnn_benchmarks and the official ResNet read them, decoded (libjpeg),
 * cropped and resized on worker threads into batches. docs/gpu-training.md. */
#ifndef KILN_RT_IMAGENET_H
#define KILN_RT_IMAGENET_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/tensor.h" /* kiln_rng */

/* A record longer than this is refused (ImageNet's largest JPEG is ~15 MB) */
#define KILN_IMAGENET_MAX_RECORD (64u << 20)

typedef struct kiln_imagenet kiln_imagenet;

typedef struct kiln_imagenet_cfg {
    const char *dir;
    const char
        *split; /* the files' prefix: "train" reads DIR/train-*, "validation" DIR/validation-* */
    int batch, size; /* images per batch; the side of the square crops */
    int classes;     /* every label must be below it */
    int threads; /* decoding threads: 0 = the machine's cores (at most 16); never more than files */
    int train;   /* random-sized crops and flips (Inception's); else the central 87.5% */
    uint64_t seed;
} kiln_imagenet_cfg;

/* Lists the files and starts the threads. NULL with a sentence in err. */
kiln_imagenet *kiln_imagenet_open(const kiln_imagenet_cfg *c, char *err, size_t errlen);
int kiln_imagenet_files(const kiln_imagenet *d);
int kiln_imagenet_threads(const kiln_imagenet *d);
/* The next batch: images [batch, size, size, 3] (RGB, NHWC, normalised by
 * ImageNet's per-channel mean and standard deviation) and their labels;
 * valid until the next call. The files repeat, in a new order each pass
 * when training. 0, or -1 with a sentence in err (a bad record names its
 * file and number); after -1 every call fails. */
int kiln_imagenet_next(kiln_imagenet *d, const float **x, const int32_t **labels, char *err,
                       size_t errlen);
/* The reader's own rate, images/s: the images decoded so far (*images, may
 * be NULL) per second of the threads' work on them (reading, checking,
 * decoding, cropping; not the time a thread waited for room in the ring),
 * times the threads: what the reader sustains when the trainer never makes
 * it wait, to print beside the step's rate (a reader slower than the step
 * is the limit). 0 before the first image. */
double kiln_imagenet_rate(kiln_imagenet *d, uint64_t *images);
void kiln_imagenet_close(kiln_imagenet *d);

/* One JPEG into out[size * size * 3], as the threads do: train: a random
 * crop of 8-100% of the area and aspect 3/4-4/3 (from g), flipped half the
 * time; else the central square of 87.5% of the shorter side. Decoded at
 * the smallest DCT scale that keeps the crop at least size pixels, then
 * resized bilinearly. 0, or -1 with a sentence in why. */
int kiln_jpeg_crop(const uint8_t *jpg, size_t n, int size, int train, kiln_rng *g, float *out,
                   char *why, size_t whylen);

#endif

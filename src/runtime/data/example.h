/* data/example.h - one image and its label from a tf.Example record
 * (tensorflow/core/example/example.proto, feature.proto), as TensorFlow's
 * ImageNet build script (build_imagenet_data.py) writes them:
 * "image/encoded" (bytes: the JPEG) and "image/class/label" (int64). */
#ifndef KILN_RT_EXAMPLE_H
#define KILN_RT_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define KILN_EXAMPLE_IMAGE_KEY "image/encoded"
#define KILN_EXAMPLE_LABEL_KEY "image/class/label"

/* Parses rec[0..n): *img points into rec (its first image/encoded value,
 * *img_n bytes), *label is the first image/class/label value. 0, or -1 with
 * *why a constant sentence (malformed, a key missing or of another type).
 * Any bytes are safe to pass (fuzzed: tests/fuzz/fuzz_example.c). */
int kiln_example_image(const uint8_t *rec, size_t n, const uint8_t **img, size_t *img_n,
                       int64_t *label, const char **why);

#endif

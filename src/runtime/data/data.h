/* runtime/data/data.h - datasets for the trainer: IDX files (MNIST format, raw
 * or gzip), Fashion-MNIST, per-epoch seeded shuffling, sharding across data
 * parallel replicas, and a background prefetcher that assembles batches.
 *
 * Layout of a loaded dataset: images are float32 in [0,1] (byte value / 255),
 * example-major and row-major inside an example: pixel (y, x) of example i is
 * images[i*dim + y*cols + x], dim = rows*cols (784 for MNIST, one channel, i.e.
 * NCHW with C=1 or equally NHWC). Labels are uint8 class indices < num_classes.
 *
 * Determinism: the order of epoch e is a pure function of (seed, e, n); a run
 * resumed at (epoch, step) sees the same batches as one that never stopped,
 * and batch contents never depend on thread timing. */
#ifndef KILN_RT_DATA_H
#define KILN_RT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Caps on what an IDX file may claim: a hostile header cannot make us allocate
 * more than this (decompressed payload) or declare more dimensions. */
#define KILN_IDX_MAX_BYTES ((size_t)1 << 30) /* 1 GiB */
#define KILN_IDX_MAX_DIMS  4

/* ---- IDX ---- */
typedef struct kiln_idx {
    uint8_t type;                     /* element type code; only 0x08 (uint8) is accepted */
    uint8_t ndim;                     /* 1..KILN_IDX_MAX_DIMS */
    uint32_t dims[KILN_IDX_MAX_DIMS]; /* dims[0] = item count */
    size_t nbytes;                    /* product of dims */
    uint8_t *data;                    /* nbytes, owned */
} kiln_idx;

/* Reads an IDX file (gzip or raw, detected by content). Validates the magic
 * (0x0000 08 ND), that every dim is > 0, that the product fits max_bytes
 * (0 = KILN_IDX_MAX_BYTES), and that the file holds exactly that many bytes
 * (short = "truncated", longer = "trailing bytes"). On failure *out is left
 * zeroed and err names the file and the problem. On success the caller owns
 * out->data and frees it with kiln_idx_free. */
kiln_err kiln_idx_read(const char *path, size_t max_bytes, kiln_idx *out, kiln_errmsg *err);
void kiln_idx_free(kiln_idx *idx);

/* ---- datasets ---- */
typedef struct kiln_dataset {
    size_t n;             /* examples */
    uint32_t rows, cols;  /* 28, 28 */
    size_t dim;           /* rows * cols */
    uint32_t num_classes; /* 10 */
    float *images;        /* n * dim, owned */
    uint8_t *labels;      /* n, owned */
} kiln_dataset;

typedef enum kiln_split { KILN_SPLIT_TRAIN = 0, KILN_SPLIT_TEST = 1 } kiln_split;

/* Loads an images file (magic 0x00000803, 3 dims) and a labels file (magic
 * 0x00000801, 1 dim) as a pair: counts must match and every label must be
 * < num_classes (10). The caller frees with kiln_dataset_free. */
kiln_err kiln_dataset_load_idx(const char *images_path, const char *labels_path, kiln_dataset *out,
                               kiln_errmsg *err);

/* Fashion-MNIST (or MNIST: same file names) from dir (NULL or "" =
 * KILN_FASHION_MNIST_DIR): "train-images-idx3-ubyte[.gz]" + "train-labels-idx1-ubyte[.gz]"
 * for KILN_SPLIT_TRAIN, "t10k-..." for KILN_SPLIT_TEST; the .gz name is tried
 * first, then the raw one. */
kiln_err kiln_fashion_mnist_load(const char *dir, kiln_split split, kiln_dataset *out,
                                 kiln_errmsg *err);

/* Copies examples [start, start+count) into a new dataset (clamped to n), for
 * training on a small slice in tests. */
kiln_err kiln_dataset_slice(const kiln_dataset *src, size_t start, size_t count, kiln_dataset *out,
                            kiln_errmsg *err);
void kiln_dataset_free(kiln_dataset *ds);

/* ---- order, sharding ---- */

/* Writes the order of epoch `epoch` into order[0..n): a permutation of 0..n-1
 * by Fisher-Yates driven by a PRNG seeded from (seed, epoch) alone (SplitMix64
 * mixing), so the same arguments always give the same order. */
void kiln_epoch_order(uint64_t seed, uint64_t epoch, size_t n, uint32_t *order);

/* Steps in an epoch of n examples with global batch B: ceil(n/B), or floor(n/B)
 * with drop_last (B = 0 gives 0). */
uint64_t kiln_steps_per_epoch(size_t n, size_t batch, int drop_last);

/* Sharding for data parallelism. At step s of an epoch the global batch is
 * positions [s*B, min(n, (s+1)*B)) of the epoch's order, m positions long;
 * replica r of R takes the sub-range [floor(r*m/R), floor((r+1)*m/R)) of it.
 * The replicas' slices are disjoint and their union is exactly the global
 * batch that a single process would use, so R replicas averaging gradients
 * weighted by their counts train like one. Writes the position range relative
 * to the epoch order: [*begin, *begin + *count). */
void kiln_shard_range(size_t n, size_t batch, uint64_t step, uint32_t rank, uint32_t world,
                      size_t *begin, size_t *count);

/* ---- data-order state, for checkpoints ----
 * (seed, epoch, step) identifies where a run is; the order itself is never
 * stored since it is recomputed. Encoded as KILN_DATA_STATE_SIZE bytes:
 * "KDS1", u32 reserved, u64 seed, u64 epoch, u64 step (little-endian). */
typedef struct kiln_data_state {
    uint64_t seed;
    uint64_t epoch; /* epoch of the next batch to be consumed */
    uint64_t step;  /* step within that epoch */
} kiln_data_state;

#define KILN_DATA_STATE_SIZE 32
void kiln_data_state_encode(const kiln_data_state *s, uint8_t out[KILN_DATA_STATE_SIZE]);
/* Returns KILN_EINVAL (message in err) when len or the tag is wrong. */
kiln_err kiln_data_state_decode(const uint8_t *buf, size_t len, kiln_data_state *s,
                                kiln_errmsg *err);

/* ---- prefetcher ----
 * A background thread fills a ring of `depth` batch buffers, in order, while
 * the caller computes on earlier ones. Batches are delivered strictly in
 * (epoch, step) order; their content depends only on the options. */
typedef struct kiln_prefetch_opts {
    size_t batch_size;  /* global batch B (> 0) */
    uint64_t seed;      /* shuffling seed */
    int shuffle;        /* 0: natural order 0..n-1 every epoch (evaluation) */
    int drop_last;      /* 1: skip the final partial batch of each epoch */
    uint64_t epoch;     /* first epoch to produce (resume point) */
    uint64_t step;      /* first step within that epoch */
    uint64_t end_epoch; /* stop before this epoch; 0 = never stop on its own */
    uint32_t rank;      /* this replica, < world */
    uint32_t world;     /* replicas (0 is taken as 1) */
    unsigned depth;     /* ring size (0 = 4); at least 2 for overlap */
} kiln_prefetch_opts;

typedef struct kiln_batch {
    const float *images;   /* size * dim floats, valid until released */
    const uint8_t *labels; /* size labels */
    size_t size;           /* this replica's examples: B/R give or take one; fewer in an
                              epoch's last batch, even 0 there when it has < R examples */
    size_t global_size;    /* examples in the global batch across all replicas */
    uint64_t epoch, step;  /* which batch this is */
    int last_in_epoch;     /* 1 if it is the epoch's final step */
    void *slot_;           /* internal */
} kiln_batch;

typedef struct kiln_prefetch kiln_prefetch;

/* Starts the thread. ds must outlive the prefetcher (it is read, not copied).
 * On success *out is owned by the caller, who ends it with kiln_prefetch_stop. */
kiln_err kiln_prefetch_start(const kiln_dataset *ds, const kiln_prefetch_opts *opts,
                             kiln_prefetch **out, kiln_errmsg *err);
/* Blocks until the next batch is ready. Returns 1 and fills *b, or 0 when
 * end_epoch has been reached (no more batches). The batch's buffers stay valid
 * until kiln_prefetch_release(p, b). Call next with at most depth-1 batches
 * still held: the batch it waits for goes into the slot of the oldest one, so
 * holding all depth would wait forever. */
int kiln_prefetch_next(kiln_prefetch *p, kiln_batch *b);
void kiln_prefetch_release(kiln_prefetch *p, kiln_batch *b);
/* Stops and joins the thread and frees everything, released or not. Safe at
 * any moment (e.g. on SIGTERM between steps) and with p == NULL. */
void kiln_prefetch_stop(kiln_prefetch *p);

#ifdef __cplusplus
}
#endif
#endif

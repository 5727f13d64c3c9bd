/* fuzz_tfevents.c - libFuzzer target for the TensorBoard event file reader
 * (src/tune/tfevents.c), which reads whatever a trial's program left in its
 * directory: any bytes give whole records only (never more than it was
 * given, resumable from where it stopped), finite values only, and never a
 * crash, a read past the buffer or a large allocation. Replayed over
 * tests/fuzz/corpus/fuzz_tfevents (files of torch's SummaryWriter and of
 * tensorboard's EventFileWriter) in every build. The input is also read as
 * the data of one record framed here with good CRCs: a mutation almost never
 * keeps a record's CRC, so without that the Event decoder would see only the
 * corpus's own bytes. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/tune.h"
#include "util/crc32c.h"

static void seen(void *ud, int64_t step, double v)
{
    (void)step;
    if (!isfinite(v)) abort();
    ++*(size_t *)ud;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* `data` as one whole record: it is consumed entirely, with no CRC error. */
static void as_one_record(const uint8_t *data, size_t size)
{
    if (size > KILN_TFEVENTS_MAX_RECORD) return;
    uint8_t *rec = malloc(size + 16);
    if (!rec) return;
    put_le(rec, size, 8);
    put_le(rec + 8, kiln_crc32c_mask(kiln_crc32c_update(0, rec, 8)), 4);
    if (size) memcpy(rec + 12, data, size);
    put_le(rec + 12 + size, kiln_crc32c_mask(kiln_crc32c_update(0, data, size)), 4);
    size_t n = 0;
    bool bad = false;
    size_t used = kiln_tfevents_scan(rec, size + 16, "loss", seen, &n, &bad);
    if (bad || used != size + 16) abort();
    free(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1); /* exactly `size`: ASan sees overreads */
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    const char *tags[2] = {"loss", ""};
    for (int k = 0; k < 2; k++) {
        size_t n = 0, n2 = 0, rest = 0;
        bool bad = false;
        size_t used = kiln_tfevents_scan(copy, size, tags[k], seen, &n, &bad);
        if (used > size) abort();
        /* read again in two parts, cut anywhere: the same scalars */
        if (used) {
            bool b2 = false;
            size_t u1 = kiln_tfevents_scan(copy, used / 2, tags[k], seen, &n2, &b2);
            size_t u2 = kiln_tfevents_scan(copy + u1, used - u1, tags[k], seen, &rest, &b2);
            if (b2 || u1 + u2 != used || n2 + rest != n) abort();
        }
    }
    free(copy);
    as_one_record(data, size);
    return 0;
}

/* libFuzzer target: Kueue queues files (src/queues). A file that loads must
 * then be usable: routing a job and asking quota of every ClusterQueue must
 * not crash whatever the file said. */
#include <stdint.h>
#include <stdlib.h>

#include "kiln/queues.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kiln_queues *q = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    if (kiln_queues_load((const char *)data, size, &q, &d) == KILN_OK) {
        kiln_map labels = {0};
        char why[512];
        (void)kiln_queues_route(q, "p", &labels, why, sizeof why);
        const int64_t req[KILN_QRES_COUNT] = {2, 4000, 1LL << 30, 3};
        for (size_t c = 0; c < q->ncqs; c++) {
            kiln_qassign a;
            if (kiln_queues_fit(q, c, req, NULL, &a, why, sizeof why))
                kiln_queues_charge(q, c, &a, req, 1);
            (void)kiln_queues_share(q, c, req);
        }
        kiln_queues_free(q);
    }
    kiln_diag_free(&d);
    return 0;
}

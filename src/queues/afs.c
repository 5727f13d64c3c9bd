/* src/queues/afs.c - admission fair sharing: LocalQueues' decayed usage
 * (Kueue's AdmissionFairSharing, docs/queues.md "Admission fair sharing").
 *
 * Kueue samples each LocalQueue's usage every usageSamplingInterval and
 * keeps an exponential moving average with half-life usageHalfLifeTime;
 * kiln decays at every admission pass by the time since the last one, which
 * is the same average taken continuously. Pure arithmetic on the model:
 * the supervisor charges the running usage and calls these. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kiln/queues.h"

void kiln_queues_lq_charge(kiln_queues *q, size_t lq, const int64_t req[KILN_QRES_COUNT], int sign)
{
    if (lq >= q->nlqs) return;
    for (int r = 0; r < KILN_QRES_COUNT; r++)
        q->lqs[lq].running[r] += sign * req[r];
}

void kiln_queues_afs_sample(kiln_queues *q, int64_t now_ns)
{
    for (size_t i = 0; i < q->nlqs; i++) {
        kiln_qlq *lq = &q->lqs[i];
        if (!q->cqs[lq->cq].afs) continue;
        if (lq->sampled_ns && now_ns > lq->sampled_ns) {
            double dt = (double)(now_ns - lq->sampled_ns) / 1e9;
            double keep = pow(0.5, dt / KILN_AFS_HALF_LIFE_S);
            for (int r = 0; r < KILN_QRES_COUNT; r++)
                lq->consumed[r] = lq->consumed[r] * keep + (double)lq->running[r] * (1.0 - keep);
        }
        if (now_ns > lq->sampled_ns) lq->sampled_ns = now_ns;
    }
}

void kiln_queues_afs_penalty(kiln_queues *q, size_t lq, const int64_t req[KILN_QRES_COUNT])
{
    if (lq >= q->nlqs || !q->cqs[q->lqs[lq].cq].afs) return;
    double alpha = 1.0 - pow(0.5, KILN_AFS_SAMPLING_S / KILN_AFS_HALF_LIFE_S);
    for (int r = 0; r < KILN_QRES_COUNT; r++)
        q->lqs[lq].consumed[r] += alpha * (double)req[r];
}

double kiln_queues_afs_share(const kiln_queues *q, size_t lq)
{
    const kiln_qlq *l = &q->lqs[lq];
    double sum = 0;
    for (int r = 0; r < KILN_QRES_COUNT; r++)
        sum += r == KILN_QRES_CPU ? l->consumed[r] / 1000.0 : l->consumed[r]; /* cores */
    if (sum <= 0) return 0;
    return l->weight > 0 ? sum / l->weight : DBL_MAX;
}

void kiln_queues_afs_carry(kiln_queues *to, const kiln_queues *from)
{
    for (size_t i = 0; from && i < to->nlqs; i++)
        for (size_t j = 0; j < from->nlqs; j++) {
            const kiln_qlq *o = &from->lqs[j];
            if (strcmp(o->name, to->lqs[i].name) != 0 ||
                strcmp(o->namespace_, to->lqs[i].namespace_) != 0)
                continue;
            memcpy(to->lqs[i].consumed, o->consumed, sizeof o->consumed);
            to->lqs[i].sampled_ns = o->sampled_ns;
        }
}

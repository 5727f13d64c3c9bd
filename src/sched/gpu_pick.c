/* src/sched/gpu_pick.c - the best-connected free GPUs for a replica
 * (gpu_pick.h).
 *
 * A multi-GPU replica's collectives (NCCL's all-reduce rings and trees) run
 * at the speed of their slowest link, so a set is judged first by its worst
 * pair, then by the sum over its pairs: four GPUs on one NVLink island beat
 * two pairs on different PCIe switches. Small choices (an 8-GPU node: at
 * most 70 sets of 4) are searched whole; larger ones grow a set greedily
 * from every starting GPU, which finds islands (the structure real boards
 * have) without C(64, 8) work. */
#include "sched/gpu_pick.h"

#include <limits.h>
#include <string.h>

#define EXHAUSTIVE_MAX 20000 /* sets searched whole below this many */

typedef struct score {
    int worst, sum;
} score;

static int cost(const kiln_node *nd, int a, int b)
{
    const kiln_gpu_link *l = nd->devs[a].links ? &nd->devs[a].links[b] : NULL;
    kiln_gpu_link unknown = {0, -1};
    return kiln_devices_link_cost(l ? l : &unknown);
}

static bool better(score a, score b)
{
    return a.worst < b.worst || (a.worst == b.worst && a.sum < b.sum);
}

static score judge(const kiln_node *nd, const int *set, int k)
{
    score s = {0, 0};
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++) {
            int c = cost(nd, set[i], set[j]);
            if (c > s.worst) s.worst = c;
            s.sum += c;
        }
    return s;
}

/* C(m, k), or EXHAUSTIVE_MAX + 1 once past it */
static size_t choose(size_t m, int k)
{
    size_t c = 1;
    for (int i = 0; i < k; i++) {
        c = c * (m - (size_t)i) / (size_t)(i + 1);
        if (c > EXHAUSTIVE_MAX) return EXHAUSTIVE_MAX + 1;
    }
    return c;
}

static void exhaustive(const kiln_node *nd, const int *cand, size_t m, int want, int *out)
{
    int idx[KILN_MAX_NODE_DEVICES], set[KILN_MAX_NODE_DEVICES];
    score best = {INT_MAX, INT_MAX};
    for (int i = 0; i < want; i++)
        idx[i] = i;
    for (;;) {
        for (int i = 0; i < want; i++)
            set[i] = cand[idx[i]];
        score s = judge(nd, set, want);
        if (better(s, best)) {
            best = s;
            memcpy(out, set, (size_t)want * sizeof *out);
        }
        /* the next combination in index order */
        int i = want - 1;
        while (i >= 0 && idx[i] == (int)m - want + i)
            i--;
        if (i < 0) break;
        idx[i]++;
        for (int j = i + 1; j < want; j++)
            idx[j] = idx[j - 1] + 1;
    }
}

static void greedy(const kiln_node *nd, const int *cand, size_t m, int want, int *out)
{
    int set[KILN_MAX_NODE_DEVICES];
    bool in[KILN_MAX_NODE_DEVICES];
    score best = {INT_MAX, INT_MAX};
    for (size_t start = 0; start < m; start++) {
        memset(in, 0, sizeof in);
        set[0] = cand[start];
        in[start] = true;
        for (int k = 1; k < want; k++) {
            score bs = {INT_MAX, INT_MAX};
            size_t bq = 0;
            for (size_t q = 0; q < m; q++) {
                if (in[q]) continue;
                set[k] = cand[q];
                score s = judge(nd, set, k + 1);
                if (better(s, bs)) bs = s, bq = q;
            }
            set[k] = cand[bq];
            in[bq] = true;
        }
        score s = judge(nd, set, want);
        if (better(s, best)) {
            best = s;
            memcpy(out, set, (size_t)want * sizeof *out);
        }
    }
    /* devices in index order, as every other placement lists them */
    for (int i = 1; i < want; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
}

void kiln__sched_pick_gpus(const kiln_node *nd, const int *cand, size_t m, int want, int *out)
{
    bool topo = false;
    for (size_t i = 0; i < m; i++)
        topo |= nd->devs[cand[i]].links != NULL;
    if (want < 2 || !topo || (size_t)want >= m) {
        for (int i = 0; i < want; i++)
            out[i] = cand[i];
        return;
    }
    if (choose(m, want) <= EXHAUSTIVE_MAX)
        exhaustive(nd, cand, m, want, out);
    else
        greedy(nd, cand, m, want, out);
}

/* examples/strategy - data-parallel training of a small network with the
 * multi_worker_mirrored strategy, using only kiln's public headers.
 *
 * Every replica runs this program with TF_CONFIG naming the cluster and its
 * task (docs/distributed.md, "Using a strategy from your own program"):
 *
 *     CL='"cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223"]}'
 *     TF_CONFIG="{$CL, \"task\": {\"type\": \"chief\", \"index\": 0}}" ./strategy &
 *     TF_CONFIG="{$CL, \"task\": {\"type\": \"worker\", \"index\": 0}}" ./strategy
 *
 * The task: a synthetic 4-class problem (the label is the argmax of a fixed
 * linear map of 16 random inputs), the same data on every replica; replica r
 * trains on its slice of each global batch. At the end each replica prints
 * its first and last loss and a hash of its parameters: with the all-reduce
 * they are bit-identical on every replica. Without TF_CONFIG it trains as one
 * replica; with ps tasks in TF_CONFIG's cluster, with parameter_server (a ps
 * task serves, the replicas push and pull asynchronously). Build against an installed kiln:
 *     cc main.c $(pkg-config --cflags --libs kiln) -o strategy */
#include <kiln/strategy.h>
#include <kiln/train.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DIM = 16, CLASSES = 4, EXAMPLES = 4096, GLOBAL_BATCH = 64, STEPS = 300 };

/* the data: the same everywhere (a fixed seed), no file needed */
static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static float uniform(uint64_t *s) /* [-1, 1) */
{
    return (float)(next(s) >> 40) / (float)(1 << 23) - 1.0f;
}

static void make_data(float *x, uint8_t *y)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    float w[DIM][CLASSES];
    for (int i = 0; i < DIM; i++)
        for (int c = 0; c < CLASSES; c++)
            w[i][c] = uniform(&s);
    for (int n = 0; n < EXAMPLES; n++) {
        float best = -1e30f;
        for (int i = 0; i < DIM; i++)
            x[n * DIM + i] = uniform(&s);
        for (int c = 0; c < CLASSES; c++) {
            float z = 0;
            for (int i = 0; i < DIM; i++)
                z += x[n * DIM + i] * w[i][c];
            if (z > best) best = z, y[n] = (uint8_t)c;
        }
    }
}

/* FNV-1a over every trainable parameter's bytes */
static uint64_t params_hash(const kiln_model *m)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        const unsigned char *p = (const unsigned char *)b.data;
        for (size_t k = 0; b.is_param && k < b.size * sizeof(float); k++)
            h = (h ^ p[k]) * 0x100000001b3ull;
    }
    return h;
}

int main(void)
{
    static float x[EXAMPLES * DIM];
    static uint8_t y[EXAMPLES];
    char err[512];
    int rc = 1;
    kiln_model *m = NULL;
    kiln_strategy *s = NULL;
    /* 1. the strategy and the replicas from TF_CONFIG: multi_worker_mirrored,
     *    or parameter_server when the cluster has ps tasks */
    kiln_strategy_config cfg = {.kind = KILN_STRATEGY_AUTO, .bucket_bytes = 1 << 20};
    if (kiln_strategy_new(&cfg, &s, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "strategy: %s\n", err);
        return 1;
    }
    int world = kiln_strategy_world(s), rank = kiln_strategy_rank(s);
    int ps = kiln_strategy_kind_of(s) == KILN_STRATEGY_PARAMETER_SERVER;
    int batch = GLOBAL_BATCH / world; /* this replica's share of each batch */
    /* 2. the model: the same network and seed on every replica */
    make_data(x, y);
    m = kiln_model_new(1, 1, DIM);
    kiln_model_add(m, kiln_dense(32, KILN_RELU));
    kiln_model_add(m, kiln_dense(CLASSES, KILN_LINEAR));
    if (kiln_model_compile(m, kiln_sgd(0.1f, 0.9f), KILN_SOFTMAX_XENT, batch, 7 + rank)) {
        fprintf(stderr, "strategy: %s\n", kiln_model_error(m));
        goto out;
    }
    /* the untrained loss over the whole data set: a parameter_server
     * replica's own step losses are not comparable (its first step may
     * already see the others' updates), so it is judged against this */
    float init_loss = 0, end_loss = 0, acc = 0;
    if (ps && kiln_model_evaluate(m, x, y, EXAMPLES, &init_loss, &acc) != 0) {
        fprintf(stderr, "strategy: %s\n", kiln_model_error(m));
        goto out;
    }
    /* 3. join the group; rank 0's initial weights to everyone (the seeds
     *    above differ on purpose: the broadcast makes them equal; a
     *    parameter_server replica pulls the ps tasks' instead) */
    if (kiln_strategy_attach(s, m) != KILN_OK || kiln_strategy_broadcast_model(s, m) != KILN_OK) {
        fprintf(stderr, "strategy: %s\n", kiln_strategy_error(s));
        goto out;
    }
    if (kiln_strategy_role_of(s) == KILN_ROLE_PS) { /* a ps task serves until the chief ends */
        if (kiln_strategy_serve(s, m, NULL, NULL) != KILN_OK) {
            fprintf(stderr, "strategy: %s\n", kiln_strategy_error(s));
            goto out;
        }
        printf("ps %d done\n", kiln_strategy_task_index(s));
        rc = 0;
        goto out;
    }
    /* 4. train: each step on this replica's slice of the global batch */
    float first = 0, last = 0;
    for (int t = 0; t < STEPS; t++) {
        int b0 = (t * GLOBAL_BATCH) % EXAMPLES + rank * batch;
        float loss;
        if (kiln_strategy_train_step(s, m, x + b0 * DIM, y + b0, batch, 0, &loss, NULL) !=
            KILN_OK) {
            fprintf(stderr, "strategy: step %d: %s\n", t, kiln_strategy_error(s));
            goto out;
        }
        double l = loss; /* all-reduce: the global batch's mean loss, for the log */
        if (!ps && kiln_strategy_sum(s, &l, 1) != KILN_OK) {
            fprintf(stderr, "strategy: %s\n", kiln_strategy_error(s));
            goto out;
        }
        if (!ps) l /= world;
        if (t == 0) first = (float)l;
        last = (float)l;
    }
    if (ps && kiln_model_evaluate(m, x, y, EXAMPLES, &end_loss, &acc) != 0) {
        fprintf(stderr, "strategy: %s\n", kiln_model_error(m));
        goto out;
    }
    /* 5. all-reduce: the replicas must hold the same parameters (ps: they
     *    need not, each has its last pull); then finish */
    int differs = -1;
    if (kiln_strategy_check_replicas(s, m, &differs, NULL) != KILN_OK ||
        kiln_strategy_finish(s, m) != KILN_OK) {
        fprintf(stderr, "strategy: %s\n", kiln_strategy_error(s));
        goto out;
    }
    printf("%s rank %d of %d: loss %.4f -> %.4f, params %016llx, replicas %s\n",
           kiln_strategy_kind_name(kiln_strategy_kind_of(s)), rank, world, first, last,
           (unsigned long long)params_hash(m),
           ps            ? "asynchronous"
           : differs < 0 ? "identical"
                         : "differ");
    /* all-reduce: the global batch's loss went down; ps: the model this
     * replica holds at the end is better than its untrained one */
    rc = differs < 0 && (ps ? end_loss < init_loss : last < first) ? 0 : 1;
out:
    kiln_strategy_free(s);
    kiln_model_free(m);
    return rc;
}

/* ps/wire.h - the parameter-server messages (contents only: ZeroMQ carries
 * them, one message per ZeroMQ frame).
 *
 * Every message is a 72-byte header, little-endian, then payload_len bytes:
 *
 *   off size field
 *     0   4  magic        "KPS1" (0x3153504b)
 *     4   2  version      KILN_PS_WIRE_VERSION
 *     6   2  op           kiln_ps_op
 *     8   4  shard        the ps shard this message is for / from
 *    12   4  worker       the training replica (its rank) that sent the request
 *    16   8  model_sig    the model's signature (kiln_ps_model_sig): a worker of
 *                         another model, or another sharding, is refused
 *    24   8  version_p    PUSH: the param version the gradient was computed
 *                         from; replies: the shard's version after the request
 *    32   8  seq          request id; a reply echoes it (stale replies are dropped)
 *    40   4  status       replies: 0 ok, else a kiln_ps_status (payload = text)
 *    44   4  aux          PUSH reply: staleness of that push (saturated) and
 *                         bit 31 set when it was dropped as too stale
 *    48   8  payload_len  bytes that follow; must equal the message size - 72
 *    56   8  attempt      PUSH: the pushing client's life (grows with each
 *                         restart of the replica); PULL reply: the last attempt
 *                         this ps has seen from that worker (0: none)
 *    64   8  step         PUSH: the client's push number within its attempt
 *                         (1, 2, ...; a resend repeats it). The ps applies a
 *                         push at most once per (worker, attempt, step).
 *
 * Payloads: PUSH carries the shard's gradient (float32 x n); PUSH and PULL
 * replies carry the shard's parameters (float32 x n); PULL_STATE replies the
 * parameters then each optimizer slot (float32 x n each), then the shard's
 * dedup table (kiln_ps_dedup_encode, so a checkpoint can carry it); STATS replies
 * kiln_ps_stats as KILN_PS_STATS_WORDS u64; error replies UTF-8 text. */
#ifndef KILN_PS_WIRE_H
#define KILN_PS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define KILN_PS_MAGIC        0x3153504bu /* "KPS1" read as u32le */
#define KILN_PS_WIRE_VERSION 2           /* 2: attempt and step (exactly-once pushes) */
#define KILN_PS_HEADER_SIZE  72
/* No message, whatever its shard, may claim more than this (decoder cap). */
#define KILN_PS_MAX_PAYLOAD ((uint64_t)1 << 30)
#define KILN_PS_AUX_DROPPED 0x80000000u

typedef enum kiln_ps_op {
    KILN_PS_OP_PULL = 1,       /* -> params */
    KILN_PS_OP_PUSH = 2,       /* gradient -> params after it (one round trip a step) */
    KILN_PS_OP_PULL_STATE = 3, /* -> params + optimizer slots (checkpoints) */
    KILN_PS_OP_STATS = 4,      /* -> kiln_ps_stats */
    KILN_PS_OP_DONE = 5,       /* this worker has finished its epochs */
    KILN_PS_OP_SHUTDOWN = 6,   /* the chief ends the job: the ps exits after replying */
    KILN_PS_OP_ERROR = 7,      /* reply to a request that could not be decoded */
    KILN_PS_OP_MAX = 7
} kiln_ps_op;

typedef enum kiln_ps_status {
    KILN_PS_OK = 0,
    KILN_PS_EBADMSG = 1,  /* malformed request */
    KILN_PS_EMODEL = 2,   /* model signature or shard differs */
    KILN_PS_ESIZE = 3,    /* payload of the wrong size for this shard */
    KILN_PS_EATTEMPT = 4, /* a push from an attempt older than one already seen */
} kiln_ps_status;

typedef struct kiln_ps_hdr {
    uint16_t version;
    uint16_t op;
    uint32_t shard, worker;
    uint64_t model_sig, version_p, seq;
    uint32_t status, aux;
    uint64_t payload_len;
    uint64_t attempt, step;
} kiln_ps_hdr;

/* Writes the header into out (KILN_PS_HEADER_SIZE bytes); magic and version
 * are filled in, h->version is ignored. */
void kiln_ps_hdr_encode(const kiln_ps_hdr *h, uint8_t out[KILN_PS_HEADER_SIZE]);

/* Validates a whole received message of len bytes: magic, version (checked
 * first, so a peer of another wire version is told so), size >= header, a known op, payload_len ==
 * len - header <= max_payload, float payloads a multiple of 4. On success fills *h, points *payload
 * into buf and returns 0; otherwise -1 with one sentence in err. Never reads past len. */
int kiln_ps_msg_decode(const void *buf, size_t len, uint64_t max_payload, kiln_ps_hdr *h,
                       const uint8_t **payload, char *err, size_t errlen);

const char *kiln_ps_op_name(unsigned op);

/* Server counters, the STATS payload (u64 little-endian, this order). */
typedef struct kiln_ps_stats {
    uint64_t version;       /* updates applied = the shard's param version */
    uint64_t pushes;        /* gradients received */
    uint64_t dropped;       /* of them, dropped as staler than max_staleness */
    uint64_t staleness_sum; /* over applied and dropped pushes */
    uint64_t staleness_max;
    uint64_t workers_done; /* distinct workers that sent DONE */
    uint64_t rejected;     /* malformed or foreign requests refused */
    uint64_t duplicates;   /* pushes answered without applying: already applied */
} kiln_ps_stats;
#define KILN_PS_STATS_WORDS 8
void kiln_ps_stats_encode(const kiln_ps_stats *s, uint8_t out[KILN_PS_STATS_WORDS * 8]);
void kiln_ps_stats_decode(const uint8_t in[KILN_PS_STATS_WORDS * 8], kiln_ps_stats *s);

/* The dedup table of a shard: per worker, the last push applied (or dropped
 * as too stale) and the aux of its reply, so a resend gets the same answer.
 * The same bytes travel at the end of a PULL_STATE reply and are stored in
 * the chief's checkpoint (blob "ps_dedup/<shard>"), so a ps restored from a
 * checkpoint still tells a repeat of a push it had applied before it.
 *
 *   off size
 *     0   4  magic "KPSD" (0x4453504b)
 *     4   4  table version KILN_PS_DEDUP_VERSION
 *     8   4  count (<= KILN_PS_MAX_WORKERS)
 *    12   4  0
 *    16      count x 24 bytes: worker u32, aux u32, attempt u64, step u64
 *            (workers ascending, each once, < KILN_PS_MAX_WORKERS) */
#define KILN_PS_DEDUP_MAGIC   0x4453504bu /* "KPSD" read as u32le */
#define KILN_PS_DEDUP_VERSION 1
#define KILN_PS_DEDUP_HEADER  16
#define KILN_PS_DEDUP_ENTRY   24
#define KILN_PS_MAX_WORKERS   4096 /* worker ids a ps accepts pushes from */

typedef struct kiln_ps_dedup_entry {
    uint32_t worker, aux;
    uint64_t attempt, step;
} kiln_ps_dedup_entry;

/* Bytes kiln_ps_dedup_encode writes for count entries. */
size_t kiln_ps_dedup_size(size_t count);
/* Writes count entries (the caller orders them by worker) into out. */
void kiln_ps_dedup_encode(const kiln_ps_dedup_entry *e, size_t count, uint8_t *out);
/* Validates len bytes (magic, version, count against len and the cap,
 * workers ascending and below the cap) and fills e (room for
 * KILN_PS_MAX_WORKERS entries) and *count. 0, or -1 with a sentence. */
int kiln_ps_dedup_decode(const void *buf, size_t len, kiln_ps_dedup_entry *e, size_t *count,
                         char *err, size_t errlen);

#endif

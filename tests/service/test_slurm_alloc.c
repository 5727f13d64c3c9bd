/* tests/service/test_slurm_alloc.c - the Slurm placement backend's
 * plumbing (src/exec/slurm/alloc.h) against Slurm's answers as text, with
 * no Slurm: this file stands in for kiln_slurm_run and answers each command
 * as sbatch, squeue and scancel would (or garbage, or an error).
 *   - the allocation's batch script: a component per role, hetjob between
 *     them, its GPUs, CPUs, memory and node, the layout it writes; sbatch's
 *     arguments (user, account); Slurm's "never" answers against the others;
 *   - squeue's rows: kiln's by name prefix, a heterogeneous job once, junk
 *     skipped; the states that mean pending, running and ended;
 *   - the layout file: block distribution of SLURM_TASKS_PER_NODE ("2(x2),1"),
 *     and every malformed file refused (too many or too few tasks, a
 *     component twice or missing, a count past any job's, hosts missing);
 *   - a step's srun line, and whether an allocation has ended;
 *   - the partition's nodes, their NodeAddr resolved to addresses, a node
 *     whose address does not resolve left out and named. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/slurm/alloc.h"
#include "test.h"

/* ---- the stand-in for Slurm's commands ---- */
static char last_cmd[4096];
static const char *answer = "";
static int answer_rc = 0;
static const char *sstat_answer = "";   /* sstat's, apart */
static const char *sacct_answer = NULL; /* sacct's, apart; NULL: sacct fails */

int kiln_slurm_run(char *const argv[], char **out, int timeout_s)
{
    (void)timeout_s;
    size_t n = 0;
    last_cmd[0] = '\0';
    for (size_t i = 0; argv[i]; i++)
        n += (size_t)snprintf(last_cmd + n, sizeof last_cmd - n, "%s%s", i ? " " : "", argv[i]);
    if (strcmp(argv[0], "sacct") == 0) {
        /* no accounting: sacct says so and fails */
        *out = strdup(sacct_answer ? sacct_answer
                                   : "sacct: error: Slurm accounting storage is "
                                     "disabled\n");
        return sacct_answer ? 0 : 1;
    }
    *out = strdup(strcmp(argv[0], "sstat") == 0 ? sstat_answer : answer);
    return answer_rc;
}

static void reply(int rc, const char *text)
{
    answer_rc = rc;
    answer = text;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

int main(void)
{
    char dir[] = "/tmp/kiln-alloc-test.XXXXXX", why[512], path[512];
    CHECK(mkdtemp(dir) != NULL);

    /* ---- submit ---- */
    kiln_slurm_comp comps[2] = {{.tasks = 1, .cpus = 4, .mem_mb = 15360},
                                {.tasks = 2, .gpus = 1, .gres = "t4", .node = "n2"}};
    kiln_slurm_alloc_req rq = {.name = "kiln-p1-j1",
                               .dir = dir,
                               .partition = "gpu",
                               .account = "team-a",
                               .uid = 1234,
                               .gid = 99,
                               .comps = comps,
                               .n = 2};
    long id = 0;
    reply(0, "4242\n");
    CHECK(kiln_slurm_alloc_submit(&rq, &id, why, sizeof why) == KILN_OK);
    CHECK(id == 4242);
    CHECK(strstr(last_cmd, "sbatch --parsable --job-name=kiln-p1-j1 --partition=gpu") == last_cmd);
    CHECK(strstr(last_cmd, "--account=team-a") && strstr(last_cmd, "--uid=1234") &&
          strstr(last_cmd, "--gid=99"));
    snprintf(path, sizeof path, "%s/kiln-p1-j1.sh", dir);
    const char *sh = slurp(path);
    CHECK(sh != NULL);
    if (sh) {
        CHECK(strstr(sh, "#SBATCH --ntasks=1 --cpus-per-task=4 --mem-per-cpu=3840M\n"));
        CHECK(strstr(sh, "#SBATCH hetjob\n#SBATCH --ntasks=2 --gpus-per-task=t4:1 --nodes=1 "
                         "--nodelist=n2\n"));
        CHECK(strstr(sh, "SLURM_TASKS_PER_NODE_HET_GROUP_1"));
        CHECK(strstr(sh, "exec sleep"));
    }
    /* one component: a plain job, its variables without _HET_GROUP_ */
    rq.n = 1;
    reply(0, "77;cluster\n");
    CHECK(kiln_slurm_alloc_submit(&rq, &id, why, sizeof why) == KILN_OK && id == 77);
    sh = slurp(path);
    CHECK(sh && !strstr(sh, "hetjob") && strstr(sh, "\"$SLURM_TASKS_PER_NODE\""));
    rq.n = 2;
    /* Slurm's "never", its other errors, and an answer that is no id */
    reply(1, "sbatch: error: Batch job submission failed: Requested node configuration is not "
             "available\n");
    CHECK(kiln_slurm_alloc_submit(&rq, &id, why, sizeof why) == KILN_EINVAL);
    CHECK(strstr(why, "Requested node configuration") != NULL && id == 0);
    reply(1, "sbatch: error: Batch job submission failed: Socket timed out\n");
    CHECK(kiln_slurm_alloc_submit(&rq, &id, why, sizeof why) == KILN_EIO);
    reply(0, "Submitted batch job 5\n");
    CHECK(kiln_slurm_alloc_submit(&rq, &id, why, sizeof why) == KILN_EIO);
    CHECK(strstr(why, "not a job id") != NULL);
    rq.n = 0;
    CHECK(kiln_slurm_alloc_submit(&rq, &id, why, sizeof why) == KILN_EINVAL);
    rq.n = 2;

    /* ---- squeue's rows ---- */
    kiln_slurm_alloc_list l;
    reply(0, "7|RUNNING|None|kiln-p1-a\n7|RUNNING|None|kiln-p1-a\n8|PENDING|Resources|kiln-p1-b\n"
             "9|RUNNING|None|someone-else\ngarbage\n|||\n10|COMPLETING|None|kiln-p1-c\n");
    kiln_slurm_alloc_list_read("kiln-", &l);
    CHECK(l.ok && l.n == 3);
    const kiln_slurm_alloc_row *r = kiln_slurm_alloc_find(&l, 0, "kiln-p1-b");
    CHECK(r && r->id == 8 && strcmp(r->reason, "Resources") == 0);
    CHECK(kiln_slurm_alloc_state_of(r) == KILN_SLURM_ALLOC_PENDING);
    CHECK(kiln_slurm_alloc_state_of(kiln_slurm_alloc_find(&l, 7, NULL)) ==
          KILN_SLURM_ALLOC_RUNNING);
    CHECK(kiln_slurm_alloc_state_of(kiln_slurm_alloc_find(&l, 10, NULL)) == KILN_SLURM_ALLOC_ENDED);
    CHECK(kiln_slurm_alloc_find(&l, 9, NULL) == NULL);
    CHECK(kiln_slurm_alloc_state_of(NULL) == KILN_SLURM_ALLOC_ENDED);
    kiln_slurm_alloc_list_free(&l);
    /* a heterogeneous job's components, as squeue 22.05 lists them (%i
     * "ID+K"): one row, each component's node where it has one */
    reply(0, "12+0|RUNNING|None|kiln-p1-h|1|n1\n12+1|RUNNING|None|kiln-p1-h|1|n2\n"
             "12+2|RUNNING|None|kiln-p1-h|2|n[1-2]\n15|RUNNING|None|kiln-p1-i|1|n2\n"
             "16|RUNNING|None|kiln-p1-j|1|n 1\n12+3|RUNNING|None|kiln-p1-x|1|n1\n"
             "18+0|PENDING|Priority|kiln-p1-k|1|\n18+1|PENDING|Priority|kiln-p1-k|1|\n"
             "19_3|RUNNING|None|kiln-p1-m|1|n1\n13|RUNNING|None|kiln-p1-h+|1|n1\n");
    kiln_slurm_alloc_list_read("kiln-", &l);
    /* 12 (not 12+3: another name), 13, 15, 16, 18; not the array task */
    CHECK(l.ok && l.n == 5);
    r = kiln_slurm_alloc_find(&l, 12, NULL);
    CHECK(r && r->one_node == 3 && strcmp(r->comp_node[0], "n1") == 0 &&
          strcmp(r->comp_node[1], "n2") == 0);
    CHECK(kiln_slurm_alloc_find(&l, 19, NULL) == NULL);
    {
        kiln_slurm_comp two[3] = {{.tasks = 1}, {.tasks = 2}, {.tasks = 2}};
        kiln_slurm_node_name a[1], b[2], c[2];
        kiln_slurm_node_name *const rows[3] = {a, b, c};
        CHECK(kiln_slurm_alloc_layout_row(r, two, 2, rows) == KILN_OK);
        CHECK(strcmp(a[0], "n1") == 0 && strcmp(b[0], "n2") == 0 && strcmp(b[1], "n2") == 0);
        /* component 2 spans two nodes: the batch script's file says how */
        CHECK(kiln_slurm_alloc_layout_row(r, two, 3, rows) == KILN_ECONFLICT);
        r = kiln_slurm_alloc_find(&l, 15, NULL);
        CHECK(r && kiln_slurm_alloc_layout_row(r, two, 1, rows) == KILN_OK &&
              strcmp(a[0], "n2") == 0);
        /* a node name with a space is not a node name */
        r = kiln_slurm_alloc_find(&l, 16, NULL);
        CHECK(r && r->one_node == 0 &&
              kiln_slurm_alloc_layout_row(r, two, 1, rows) == KILN_ECONFLICT);
        /* pending: no layout whatever the row says */
        r = kiln_slurm_alloc_find(&l, 18, NULL);
        CHECK(r && kiln_slurm_alloc_layout_row(r, two, 1, rows) == KILN_ECONFLICT);
        CHECK(kiln_slurm_alloc_layout_row(NULL, two, 1, rows) == KILN_ECONFLICT);
    }
    kiln_slurm_alloc_list_free(&l);
    reply(1, "squeue: error: slurm_receive_msg: Socket timed out\n");
    kiln_slurm_alloc_list_read("kiln-", &l);
    CHECK(!l.ok && l.n == 0); /* nothing known: nothing has ended */
    kiln_slurm_alloc_list_free(&l);

    /* ---- the layout ---- */
    kiln_slurm_comp lc[2] = {{.tasks = 1}, {.tasks = 5}};
    kiln_slurm_node_name n0[1], n1[5];
    kiln_slurm_node_name *const rows[2] = {n0, n1};
    CHECK(kiln_slurm_alloc_layout(dir, 55, lc, 2, rows, why, sizeof why) == KILN_ECONFLICT);
    snprintf(path, sizeof path, "%s/layout.55", dir);
    put(path, "0 1 n1\n1 2(x2),1 n2 n3 n4\n");
    CHECK(kiln_slurm_alloc_layout(dir, 55, lc, 2, rows, why, sizeof why) == KILN_OK);
    CHECK(strcmp(n0[0], "n1") == 0);
    CHECK(strcmp(n1[0], "n2") == 0 && strcmp(n1[1], "n2") == 0 && strcmp(n1[2], "n3") == 0 &&
          strcmp(n1[3], "n3") == 0 && strcmp(n1[4], "n4") == 0);
    const char *bad[] = {
        "0 1 n1\n",                       /* a component missing */
        "0 1 n1\n0 1 n1\n",               /* one twice */
        "0 1 n1\n1 2(x2) n2 n3\n",        /* too few tasks */
        "0 1 n1\n1 2(x3) n2 n3 n4\n",     /* too many */
        "0 1 n1\n1 2(x2),1 n2 n3\n",      /* a host missing */
        "0 1 n1\n1 99999999999(x9) n2\n", /* past any job's count */
        "0 1 n1\n1 5(x0) n2\n",           /* no repeat */
        "0 1 n1\n1 x n2\n",               /* no number */
        "0 1 n1\n1 5;rm n2\n",            /* junk after it */
        "7 1 n1\n1 5 n2\n",               /* no such component */
        "0 1 n1\n1\n",                    /* no counts */
        "0 1 nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn\n1 5 "
        "n2\n",
        "", /* empty */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        put(path, bad[i]);
        kiln_err e = kiln_slurm_alloc_layout(dir, 55, lc, 2, rows, why, sizeof why);
        if (e != KILN_EIO) fprintf(stderr, "layout %zu accepted: %s", i, bad[i]);
        CHECK(e == KILN_EIO);
    }
    unlink(path);

    /* ---- a step's srun, an allocation's end ---- */
    kiln_strv av = {0};
    CHECK(kiln_slurm_step_argv(42, 1, "n2", 2, 0, "worker-replica-1", &av) == KILN_OK);
    CHECK(av.n > 3 && strcmp(av.v[0], "srun") == 0 && strcmp(av.v[av.n - 1], "--") == 0);
    bool het = false, gpus = false, cpus = false, node = false;
    for (size_t i = 0; i < av.n; i++) {
        het |= strcmp(av.v[i], "--het-group=1") == 0;
        gpus |= strcmp(av.v[i], "--gpus-per-task=2") == 0;
        cpus |= strncmp(av.v[i], "--cpus-per-task", 15) == 0;
        node |= strcmp(av.v[i], "--nodelist=n2") == 0;
    }
    CHECK(het && gpus && !cpus && node);
    kiln_strv_clear(&av);
    CHECK(kiln_slurm_step_argv(42, -1, "n1", 0, 4, "master-replica-0", &av) == KILN_OK);
    het = gpus = cpus = false;
    for (size_t i = 0; i < av.n; i++) {
        het |= strncmp(av.v[i], "--het-group", 11) == 0;
        gpus |= strncmp(av.v[i], "--gpus-per-task", 15) == 0;
        cpus |= strcmp(av.v[i], "--cpus-per-task=4") == 0;
    }
    CHECK(!het && !gpus && cpus);
    kiln_strv_clear(&av);
    char st[32];
    reply(0, "RUNNING\n");
    CHECK(!kiln_slurm_alloc_ended(42, st, sizeof st) && strcmp(st, "RUNNING") == 0);
    reply(0, "CANCELLED\n");
    CHECK(kiln_slurm_alloc_ended(42, st, sizeof st));
    reply(0, "");
    CHECK(kiln_slurm_alloc_ended(42, st, sizeof st) && st[0] == '\0');
    reply(1, "slurm_load_jobs error: Invalid job id specified\n");
    CHECK(kiln_slurm_alloc_ended(42, st, sizeof st));
    reply(1, "squeue: error: Unable to contact slurm controller\n");
    CHECK(!kiln_slurm_alloc_ended(42, st, sizeof st)); /* unknown is not ended */

    /* ---- a step's use, from Slurm's job accounting ---- */
    unsigned long long us = 0;
    long long mem = 0;
    reply(0, "42.0|master-replica-0\n42.1|worker-replica-1\n42.batch|batch\n");
    sstat_answer = "cpu=00:01:03,energy=0,fs/disk=14937,mem=4780K,pages=0,vmem=8112K\n";
    CHECK(kiln_slurm_step_usage(42, "worker-replica-1", &us, &mem));
    CHECK(strstr(last_cmd, "sstat") && strstr(last_cmd, "42.1"));
    CHECK(us == 63000000ULL && mem == 4780LL * 1024);
    sstat_answer = "cpu=1-02:00:00,mem=1.5G\n";
    CHECK(kiln_slurm_step_usage(42, "worker-replica-1", &us, &mem));
    CHECK(us == (86400ULL + 7200ULL) * 1000000ULL && mem == 1610612736LL);
    sstat_answer = "cpu=01:02.500,mem=12M";
    CHECK(kiln_slurm_step_usage(42, "master-replica-0", &us, &mem) && us == 62500000ULL);
    const char *nonsense[] = {"",       "energy=0",           "cpu=", "cpu=aa:bb", "cpu=1:2:3:4x",
                              "cpu=-5", "cpu=00:00:0a,mem=1K"};
    for (size_t i = 0; i < sizeof nonsense / sizeof *nonsense; i++) {
        sstat_answer = nonsense[i];
        bool got = kiln_slurm_step_usage(42, "worker-replica-1", &us, &mem);
        if (got) fprintf(stderr, "sstat answer %zu taken: %s\n", i, nonsense[i]);
        CHECK(!got);
    }
    sstat_answer = "cpu=00:00:01";
    CHECK(!kiln_slurm_step_usage(42, "no-such-step", &us, &mem)); /* not among the steps */

    /* ---- how an allocation ended: Slurm took it, or its script ended ---- */
    char est[64], ec[16];
    struct {
        int rc;
        const char *squeue, *sacct;
        kiln_slurm_end want;
        const char *state, *code;
    } ends[] = {
        {0, "RUNNING\n", NULL, KILN_SLURM_END_RUNNING, "RUNNING", ""},
        {0, "PREEMPTED\n", NULL, KILN_SLURM_END_TAKEN, "PREEMPTED", ""},
        {0, "NODE_FAIL\n", NULL, KILN_SLURM_END_TAKEN, "NODE_FAIL", ""},
        {0, "TIMEOUT\n", NULL, KILN_SLURM_END_TAKEN, "TIMEOUT", ""},
        {0, "CANCELLED\n", NULL, KILN_SLURM_END_TAKEN, "CANCELLED", ""},
        {0, "PENDING\n", NULL, KILN_SLURM_END_TAKEN, "PENDING", ""}, /* requeued */
        {0, "REQUEUED\n", NULL, KILN_SLURM_END_TAKEN, "REQUEUED", ""},
        {0, "FAILED\n", NULL, KILN_SLURM_END_EXITED, "FAILED", ""},
        {0, "COMPLETED\n", NULL, KILN_SLURM_END_EXITED, "COMPLETED", ""},
        /* squeue forgot it: sacct's record decides */
        {1, "slurm_load_jobs error: Invalid job id specified\n", "FAILED|1:0\n",
         KILN_SLURM_END_EXITED, "FAILED", "1:0"},
        {1, "slurm_load_jobs error: Invalid job id specified\n", "CANCELLED by 0|0:15\n",
         KILN_SLURM_END_TAKEN, "CANCELLED by 0", "0:15"},
        {0, "COMPLETING\n", "OUT_OF_MEMORY|0:125\n", KILN_SLURM_END_EXITED, "OUT_OF_MEMORY",
         "0:125"},
        /* no record anywhere (no accounting): taken, as before */
        {1, "slurm_load_jobs error: Invalid job id specified\n", NULL, KILN_SLURM_END_TAKEN, "",
         ""},
    };
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
        reply(ends[i].rc, ends[i].squeue);
        sacct_answer = ends[i].sacct;
        kiln_slurm_end e = kiln_slurm_alloc_end(77, est, sizeof est, ec, sizeof ec);
        CHECK_MSG(e == ends[i].want && strcmp(est, ends[i].state) == 0 &&
                      strcmp(ec, ends[i].code) == 0,
                  "end %zu: %d '%s' '%s'", i, (int)e, est, ec);
    }
    sacct_answer = NULL;
    CHECK(kiln_slurm_end_of("garbage") == KILN_SLURM_END_TAKEN &&
          kiln_slurm_end_of(NULL) == KILN_SLURM_END_TAKEN);

    /* ---- the partition's nodes: NodeAddr resolved once, to an address ----
     * (NodeHostname=localhost as a real slurm.conf names nodes, with no
     * NodeAddr, shows as sinfo's %o "localhost"; podman's --add-host and
     * TF_CONFIG need 127.0.0.1) */
    kiln_cluster cl = {0};
    char note[512];
    reply(0, "n1|localhost|2|4000|gpu:t4:2(S:0)\n"
             "n2|127.0.0.2|2|4000|gpu:t4:2\n"
             "n3|no-such-node.invalid|2|4000|(null)\n"
             "n4.invalid||2|4000|(null)\n");
    CHECK(kiln_slurm_cluster("kiln", false, NULL, NULL, &cl, note, sizeof note, why, sizeof why) ==
          KILN_OK);
    CHECK(strstr(last_cmd, "sinfo") == last_cmd && strstr(last_cmd, "%N|%o|"));
    CHECK_MSG(cl.n == 2, "%zu nodes", cl.n);
    if (cl.n == 2) {
        CHECK(strcmp(cl.nodes[0].name, "n1") == 0 && strcmp(cl.nodes[0].address, "127.0.0.1") == 0);
        CHECK(strcmp(cl.nodes[1].name, "n2") == 0 && strcmp(cl.nodes[1].address, "127.0.0.2") == 0);
        CHECK(cl.nodes[0].n_devs == 2);
    }
    /* n3's name does not resolve, nor does n4's NodeName (no NodeAddr):
     * reported, not used */
    CHECK_MSG(
        strstr(note, "node n3 is not used: its NodeAddr 'no-such-node.invalid' does not "
                     "resolve") &&
            strstr(note, "node n4.invalid is not used: its NodeAddr 'n4.invalid' does not resolve"),
        "%s", note);
    kiln_cluster_free(&cl);
    reply(0, "n3|no-such-node.invalid|2|4000|(null)\n");
    CHECK(kiln_slurm_cluster("kiln", false, NULL, NULL, &cl, note, sizeof note, why, sizeof why) ==
          KILN_EINVAL);
    CHECK_MSG(strstr(why, "has no nodes kilnd can use: node n3 is not used"), "%s", why);
    kiln_cluster_free(&cl);

    snprintf(path, sizeof path, "rm -rf %s", dir);
    if (system(path) != 0) {
    }
    TEST_DONE();
}

/* src/exec/slurm/task/kiln-slurm-task.c - one replica of a kiln job, as one
 * task of a Slurm step (the batch script kilnd writes runs it through srun).
 *
 *   kiln-slurm-task RUNDIR SPEC ROLE
 *
 * RUNDIR is DIR/slurm/SLURM_JOB_ID (on a file system every node shares),
 * SPEC the job's spec.json (kilnd wrote it: per replica its task name,
 * port, program and environment with "@KILN_HOST_i@" where replica i's
 * address goes). The replica is SPEC's ROLE replica number SLURM_PROCID.
 *
 *  1. its address: the Slurm node's NodeAddr (scontrol show node), written
 *     to RUNDIR/hosts/TASK; then it waits (at most 120 s) for every other
 *     replica's file: the cluster of TF_CONFIG is the nodes Slurm picked;
 *  2. its environment: kilnd's allow-list (PATH, HOME, ...), SLURM_*, the
 *     CUDA_VISIBLE_DEVICES Slurm set (its GPUs), then SPEC's with the
 *     addresses in place;
 *  3. the program runs under kiln-monitor (RUNDIR/TASK.state, .exit), which
 *     writes its output as log lines of TASK into the job's log; this exits
 *     with the program's status, so that srun and Slurm see it.
 * SIGTERM (scancel --signal=TERM reaches every process of the step) is
 * caught here so that the status is still reported. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/exec_int.h" /* kiln__mon_argv, kiln__exec_allowed_env */
#include "kiln/exec.h"
#include "util/atomic.h"

extern char **environ;

static void on_term(int sig)
{
    (void)sig; /* the monitor and the program got it too; their exit is reported */
}

static void die(const char *task, const char *fmt, const char *a)
{
    fprintf(stderr, "kiln-slurm-task %s: ", task ? task : "");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    exit(127);
}

/* The node's address: NodeAddr= of `scontrol -o show node NAME`. */
static void node_addr(const char *node, char *buf, size_t len)
{
    char cmd[300], line[4096];
    snprintf(buf, len, "%s", node);
    snprintf(cmd, sizeof cmd, "scontrol -o show node '%s' 2>/dev/null", node);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (fgets(line, sizeof line, p)) {
        char *a = strstr(line, "NodeAddr=");
        if (a) {
            a += 9;
            size_t n = strcspn(a, " \n");
            if (n) snprintf(buf, len, "%.*s", (int)n, a);
        }
    }
    pclose(p);
}

/* Replaces every "@KILN_HOST_i@" in `s` by hosts[i]; a new string. */
static char *subst(const char *s, char **hosts, size_t n)
{
    size_t cap = strlen(s) + 1, len = 0;
    for (size_t i = 0; i < n; i++)
        cap += strlen(hosts[i]) * 8;
    char *out = malloc(cap + 256);
    if (!out) return NULL;
    while (*s) {
        size_t idx;
        int used = 0;
        if (strncmp(s, "@KILN_HOST_", 11) == 0 && sscanf(s + 11, "%zu@%n", &idx, &used) == 1 &&
            used > 0 && s[11 + used - 1] == '@' && idx < n) {
            size_t hl = strlen(hosts[idx]);
            if (len + hl + 1 > cap + 255) break;
            memcpy(out + len, hosts[idx], hl);
            len += hl;
            s += 11 + used;
            continue;
        }
        if (len + 2 > cap + 255) break;
        out[len++] = *s++;
    }
    out[len] = '\0';
    return out;
}

/* Besides kilnd's allow-list for replicas (kiln__exec_allowed_env) and
 * Slurm's SLURM_*: the user's identity, as the local monitor sets it, and
 * the GPUs Slurm gave this task. */
static const char *const task_env[] = {"HOME", "USER", "LOGNAME", "CUDA_VISIBLE_DEVICES", NULL};

static bool listed(const char *const *list, const char *kv)
{
    for (size_t i = 0; list[i]; i++) {
        size_t n = strlen(list[i]);
        if (strncmp(kv, list[i], n) == 0 && kv[n] == '=') return true;
    }
    return false;
}

static bool kept(const char *kv)
{
    return strncmp(kv, "SLURM", 5) == 0 || listed(kiln__exec_allowed_env, kv) ||
           listed(task_env, kv);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: kiln-slurm-task RUNDIR SPEC ROLE\n");
        return 2;
    }
    const char *rundir = argv[1], *role = argv[3];
    const char *procid = getenv("SLURM_PROCID"), *node = getenv("SLURMD_NODENAME");
    int index = procid ? atoi(procid) : 0;
    json_error_t jerr;
    json_t *spec = json_load_file(argv[2], 0, &jerr);
    if (!spec) die(role, "cannot read the job's spec: %s", jerr.text);
    json_t *reps = json_object_get(spec, "replicas"), *me = NULL, *r;
    size_t n = json_array_size(reps), i;
    json_array_foreach(reps, i, r)
    {
        const char *rr = json_string_value(json_object_get(r, "role"));
        if (rr && strcmp(rr, role) == 0 &&
            json_integer_value(json_object_get(r, "index")) == index) {
            me = r;
        }
    }
    if (!me) die(role, "no replica of this role and index in the spec (%s)", procid);
    const char *task = json_string_value(json_object_get(me, "task"));

    /* 1. where this replica is, and where the others are */
    char addr[256], path[PATH_MAX + 128];
    node_addr(node ? node : "localhost", addr, sizeof addr);
    snprintf(path, sizeof path, "%s/hosts", rundir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/hosts/%s", rundir, task);
    char line[300];
    snprintf(line, sizeof line, "%s %s\n", addr, node ? node : "");
    if (kiln__write_atomic(path, line, strlen(line), 0644) != 0) die(task, "cannot write %s", path);
    char **hosts = calloc(n ? n : 1, sizeof *hosts);
    if (!hosts) die(task, "%s", "out of memory");
    for (int waited = 0;; waited++) {
        size_t have = 0;
        json_array_foreach(reps, i, r)
        {
            if (hosts[i]) {
                have++;
                continue;
            }
            snprintf(path, sizeof path, "%s/hosts/%s", rundir,
                     json_string_value(json_object_get(r, "task")));
            FILE *f = fopen(path, "r");
            char h[256];
            if (f && fscanf(f, "%255s", h) == 1) {
                hosts[i] = strdup(h);
                have++;
            }
            if (f) fclose(f);
        }
        if (have == n) break;
        if (waited > 1200) die(task, "%s", "the other replicas did not start within 120 s");
        usleep(100000);
    }

    /* 2. the environment; the identity is the one this task runs as: a
     * job root submitted for a project's user (sbatch --uid) carries
     * root's HOME and USER from the submitter's environment */
    struct passwd *pw = getpwuid(getuid());
    const char *user = getenv("USER");
    if (pw && (!user || strcmp(user, pw->pw_name) != 0) &&
        (setenv("HOME", pw->pw_dir, 1) || setenv("USER", pw->pw_name, 1) ||
         setenv("LOGNAME", pw->pw_name, 1)))
        die(task, "%s", "out of memory");
    char **old = environ;
    size_t no = 0;
    while (old[no])
        no++;
    json_t *env = json_object_get(me, "env"), *e;
    char **nenv = calloc(no + json_array_size(env) + 2, sizeof *nenv);
    if (!nenv) die(task, "%s", "out of memory");
    size_t k = 0;
    for (size_t q = 0; q < no; q++)
        if (kept(old[q])) nenv[k++] = old[q];
    size_t own = k; /* nenv[own, k) are ours (subst), freed at the end */
    bool has_cvd = getenv("CUDA_VISIBLE_DEVICES") != NULL;
    json_array_foreach(env, i, e)
    {
        const char *kv = json_string_value(e);
        if (!kv) continue;
        /* the GPUs are Slurm's: its CUDA_VISIBLE_DEVICES stands */
        if (strncmp(kv, "CUDA_VISIBLE_DEVICES=", 21) == 0 && has_cvd) continue;
        char *s = subst(kv, hosts, n);
        if (s) nenv[k++] = s;
    }
    size_t own_end = k;
    nenv[k++] = "KILN_MONITOR_HOLD_TERM=1"; /* the monitor outlives the step's SIGTERM */
    nenv[k] = NULL;

    /* 3. the program under its monitor */
    json_t *av = json_object_get(me, "argv");
    size_t na = json_array_size(av);
    char state[PATH_MAX + 64], rlog[PATH_MAX + 64];
    snprintf(state, sizeof state, "%s/%s", rundir, task);
    snprintf(rlog, sizeof rlog, "%s/%s.log", rundir, task);
    const char *mon = json_string_value(json_object_get(spec, "monitor"));
    const char *jlog = json_string_value(json_object_get(spec, "jobLog"));
    const char *work = json_string_value(json_object_get(spec, "workDir"));
    if (!mon || !jlog || !work || na == 0) die(task, "%s", "the spec lacks the monitor or program");
    const char **prog = calloc(na, sizeof *prog);
    if (!prog) die(task, "%s", "out of memory");
    for (i = 0; i < na; i++)
        prog[i] = json_string_value(json_array_get(av, i));
    /* processes only: kilnd's own user (-1), no image to pull */
    kiln__mon_args ma = {.monitor = mon,
                         .state = state,
                         .job_log = jlog,
                         .rep_log = rlog,
                         .task = task,
                         .work_dir = work,
                         .log_cap = (long long)json_integer_value(json_object_get(spec, "logCap")),
                         .uid = -1,
                         .gid = -1};
    kiln_strv mav = {0};
    if (kiln__mon_argv(&ma, prog, na, &mav) != KILN_OK) die(task, "%s", "out of memory");
    char **margv = calloc(mav.n + 1, sizeof *margv);
    if (!margv) die(task, "%s", "out of memory");
    memcpy(margv, mav.v, mav.n * sizeof *margv);

    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL); /* a handler, not SIG_IGN: the monitor gets the default */
    pid_t pid = fork();
    if (pid < 0) die(task, "cannot fork: %s", strerror(errno));
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        execve(mon, margv, nenv);
        fprintf(stderr, "kiln-slurm-task %s: cannot run %s: %s\n", task, mon, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    /* the monitor records the program's status in STATE.exit */
    snprintf(path, sizeof path, "%s.exit", state);
    FILE *f = fopen(path, "r");
    int code = 255;
    if (f) {
        if (fscanf(f, "code %d", &code) != 1) code = 255;
        fclose(f);
    } else if (WIFSIGNALED(status)) {
        code = 128 + WTERMSIG(status);
    }
    /* everything freed: a sanitized build's leak report would otherwise
     * turn the replica's status into LeakSanitizer's exit 1 */
    free(margv);
    kiln_strv_clear(&mav);
    free(prog);
    for (size_t q = own; q < own_end; q++)
        free(nenv[q]);
    free(nenv);
    for (size_t q = 0; q < n; q++)
        free(hosts[q]);
    free(hosts);
    json_decref(spec);
    return code < 0 ? 255 : code > 255 ? 255 : code;
}

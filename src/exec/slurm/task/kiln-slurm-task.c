/* src/exec/slurm/task/kiln-slurm-task.c - one replica of a kiln job, as one
 * task of a Slurm step (the batch script kilnd writes runs it through srun).
 *
 *   kiln-slurm-task RUNDIR SPEC ROLE [INDEX]
 *
 * RUNDIR is DIR/slurm/SLURM_JOB_ID (on a file system every node shares),
 * SPEC the job's spec.json (kilnd wrote it: per replica its task name,
 * port, program and environment with "@KILN_HOST_i@" where replica i's
 * address goes). The replica is SPEC's ROLE replica number SLURM_PROCID,
 * or INDEX where given (an elastic job's worker: a Slurm job of its own,
 * whose one task is not the role's replica 0).
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
#include <netdb.h>
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

static volatile sig_atomic_t terms; /* SIGTERMs received */

static void on_term(int sig)
{
    (void)sig; /* the monitor and the program got it too; their exit is reported */
    terms++;
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

/* A node's address as podman's --add-host takes it: numeric (NodeAddr is
 * often a host name); IPv4 first. The name itself when it does not resolve
 * (podman then says so, in the replica's log). */
static char *numeric(const char *host)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char buf[NI_MAXHOST];
    if (getaddrinfo(host, NULL, &hints, &ai) != 0) {
        hints.ai_family = AF_UNSPEC;
        if (getaddrinfo(host, NULL, &hints, &ai) != 0) ai = NULL;
    }
    bool ok = ai && getnameinfo(ai->ai_addr, ai->ai_addrlen, buf, sizeof buf, NULL, 0,
                                NI_NUMERICHOST) == 0;
    if (ai) freeaddrinfo(ai);
    return strdup(ok ? buf : host);
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

/* Runs av in a session of its own, out of the step's process tree (its
 * parent exits at once), so that Slurm's SIGKILL of the step spares it. */
static void detached(const kiln_strv *av)
{
    char **v = calloc(av->n + 1, sizeof *v);
    if (!v) return;
    memcpy(v, av->v, av->n * sizeof *v);
    pid_t p = fork();
    if (p == 0) {
        setsid();
        if (fork() == 0) {
            int fd = open("/dev/null", O_RDWR);
            if (fd >= 0) {
                dup2(fd, 0);
                dup2(fd, 1);
                dup2(fd, 2);
            }
            signal(SIGTERM, SIG_DFL);
            execvp(v[0], v);
            _exit(127);
        }
        _exit(0);
    }
    if (p > 0)
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {
        }
    free(v);
}

/* A JSON array of strings as a kiln_strv (non-strings skipped). */
static void strv_of(json_t *a, kiln_strv *v)
{
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        if (json_is_string(x) && kiln_strv_push(v, json_string_value(x)) != KILN_OK) return;
    }
}

/* "0,1,..." for n GPUs: how CUDA counts the GPUs a container was given. */
static char *renumbered(size_t n)
{
    char *out = calloc(n * 12 + 1, 1);
    size_t len = 0;
    for (size_t i = 0; out && i < n; i++)
        len += (size_t)sprintf(out + len, "%s%zu", i ? "," : "", i);
    return out;
}

static bool kept(const char *kv)
{
    return strncmp(kv, "SLURM", 5) == 0 || listed(kiln__exec_allowed_env, kv) ||
           listed(task_env, kv);
}

/* kiln-slurm-task --devices PROG ARGS...: a container replica launched as a
 * step of its gang's allocation (kilnd --slurm-launch steps). The GPUs are
 * the ones Slurm gave the step (its CUDA_VISIBLE_DEVICES): each goes in
 * through CDI (--device nvidia.com/gpu=N) where PROG's KILN_SLURM_DEVICES
 * argument stands, and inside the container CUDA counts them from 0. */
static int exec_devices(int argc, char **argv)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    kiln_strv av = {0}, devs = {0};
    char *copy = cvd ? strdup(cvd) : NULL, *save = NULL;
    for (char *g = copy ? strtok_r(copy, ",", &save) : NULL; g; g = strtok_r(NULL, ",", &save)) {
        char dev[64];
        snprintf(dev, sizeof dev, "nvidia.com/gpu=%s", g);
        if (kiln_strv_push(&devs, "--device") != KILN_OK || kiln_strv_push(&devs, dev) != KILN_OK)
            die("kiln-slurm-task", "%s", "out of memory");
    }
    free(copy);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "KILN_SLURM_DEVICES") == 0) {
            for (size_t q = 0; q < devs.n; q++)
                if (kiln_strv_push(&av, devs.v[q]) != KILN_OK)
                    die("kiln-slurm-task", "%s", "out of memory");
            continue;
        }
        if (kiln_strv_push(&av, argv[i]) != KILN_OK) die("kiln-slurm-task", "%s", "out of memory");
    }
    if (av.n == 0) die("kiln-slurm-task", "%s", "--devices: nothing to run");
    if (devs.n) {
        char *num = renumbered(devs.n / 2);
        if (!num || setenv("CUDA_VISIBLE_DEVICES", num, 1) != 0)
            die("kiln-slurm-task", "%s", "out of memory");
        free(num);
    }
    char **v = calloc(av.n + 1, sizeof *v);
    if (!v) die("kiln-slurm-task", "%s", "out of memory");
    memcpy(v, av.v, av.n * sizeof *v);
    execvp(v[0], v);
    fprintf(stderr, "kiln-slurm-task: cannot run %s: %s\n", v[0], strerror(errno));
    return 127;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--devices") == 0) return exec_devices(argc, argv);
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: kiln-slurm-task RUNDIR SPEC ROLE [INDEX]\n"
                        "       kiln-slurm-task --devices PROG [ARGS...]\n");
        return 2;
    }
    const char *rundir = argv[1], *role = argv[3];
    const char *procid = getenv("SLURM_PROCID"), *node = getenv("SLURMD_NODENAME");
    int index = argc == 5 ? atoi(argv[4]) : procid ? atoi(procid) : 0;
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
    /* a container replica: the GPUs Slurm gave the task go in through CDI
     * (--device nvidia.com/gpu=N, in place of the KILN_SLURM_DEVICES
     * argument), and inside it CUDA counts them from 0 */
    const char *image = json_string_value(json_object_get(me, "image"));
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    kiln_strv devs = {0};
    char *cvd_in = NULL;
    if (image && cvd && *cvd) {
        char *copy = strdup(cvd), *save = NULL;
        if (!copy) die(task, "%s", "out of memory");
        for (char *g = strtok_r(copy, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
            char dev[64];
            snprintf(dev, sizeof dev, "nvidia.com/gpu=%s", g);
            if (kiln_strv_push(&devs, "--device") != KILN_OK ||
                kiln_strv_push(&devs, dev) != KILN_OK)
                die(task, "%s", "out of memory");
        }
        free(copy);
        char *num = renumbered(devs.n / 2);
        if (!num || asprintf(&cvd_in, "CUDA_VISIBLE_DEVICES=%s", num) < 0)
            die(task, "%s", "out of memory");
        free(num);
        for (size_t q = 0; q < k; q++)
            if (strncmp(nenv[q], "CUDA_VISIBLE_DEVICES=", 21) == 0) nenv[q] = cvd_in;
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
    /* the program; a container's --add-host addresses are the nodes' */
    char **ips = calloc(n ? n : 1, sizeof *ips);
    if (!ips) die(task, "%s", "out of memory");
    for (size_t q = 0; image && q < n; q++)
        if (!(ips[q] = numeric(hosts[q]))) die(task, "%s", "out of memory");
    kiln_strv progv = {0};
    for (i = 0; i < na; i++) {
        const char *a = json_string_value(json_array_get(av, i));
        if (!a) continue;
        if (image && strcmp(a, "KILN_SLURM_DEVICES") == 0) {
            for (size_t q = 0; q < devs.n; q++)
                if (kiln_strv_push(&progv, devs.v[q]) != KILN_OK) die(task, "%s", "out of memory");
            continue;
        }
        char *sa = image ? subst(a, ips, n) : strdup(a);
        if (!sa || kiln_strv_push(&progv, sa) != KILN_OK) die(task, "%s", "out of memory");
        free(sa);
    }
    const char **prog = (const char **)progv.v;
    na = progv.n;
    /* a container: the image pull (unless pullPolicy Never) and check the
     * monitor runs first, as on one machine; the user is the task's own */
    kiln_strv pull = {0}, exists = {0}, killv = {0};
    strv_of(json_object_get(me, "pull"), &pull);
    strv_of(json_object_get(me, "exists"), &exists);
    strv_of(json_object_get(me, "stop"), &killv);
    kiln__mon_args ma = {.monitor = mon,
                         .pull_policy = json_string_value(json_object_get(me, "pullPolicy")),
                         .pull = image && pull.n ? &pull : NULL,
                         .exists = image ? &exists : NULL,
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
    bool stopping = false;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        /* SIGTERM (scancel --signal=TERM, or the batch script stopping the
         * job's other steps): `podman run` passes it on to the program, and
         * as on one machine the container is killed after the grace period
         * if it is still there: `podman stop --time GRACE`, detached, since
         * Slurm kills the step (this task with it) while conmon keeps the
         * container */
        if (terms >= 1 && killv.n && !stopping) {
            stopping = true;
            detached(&killv);
        }
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
    kiln_strv_clear(&progv);
    for (size_t q = 0; q < n; q++)
        free(ips[q]);
    free(ips);
    kiln_strv_clear(&pull);
    kiln_strv_clear(&exists);
    kiln_strv_clear(&killv);
    kiln_strv_clear(&devs);
    free(cvd_in);
    for (size_t q = own; q < own_end; q++)
        free(nenv[q]);
    free(nenv);
    for (size_t q = 0; q < n; q++)
        free(hosts[q]);
    free(hosts);
    json_decref(spec);
    return code < 0 ? 255 : code > 255 ? 255 : code;
}

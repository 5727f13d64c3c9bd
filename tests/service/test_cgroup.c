/* tests/service/test_cgroup.c - a container's use from its cgroup
 * (src/exec/cgroup.c, for elasticPolicy.metrics): cgroup v2 and v1 files
 * read as the kubelet reads them (CPU time; working set = usage less
 * inactive files), this process's own cgroup found and read, and the
 * containers' main processes found by name through a stand-in `podman ps`
 * that answers, and one that hangs (the call returns within its bound).
 *
 * Two CTest tests run it: `svc_test_cgroup_files` (argument "files") the
 * parts that need no cgroup file system, everywhere; `svc_test_cgroup` the
 * own-cgroup part, which needs one: it skips through the `cgroup` probe
 * where there is none (a debootstrap'd chroot). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../lib/probe.h"
#include "kiln/exec.h"
#include "test.h"

static char dir[64];

static void put(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_read(void)
{
    kiln_cgroup cg = {0};
    unsigned long long cpu = 0;
    long long mem = 0;
    snprintf(cg.cpu, sizeof cg.cpu, "%s", dir);
    snprintf(cg.mem, sizeof cg.mem, "%s", dir);
    /* cgroup v2: usage_usec; memory.current less inactive_file */
    cg.cpu_v2 = cg.mem_v2 = true;
    put("cpu.stat", "usage_usec 1500000\nuser_usec 1400000\nsystem_usec 100000\n");
    put("memory.current", "104857600\n");
    put("memory.stat", "anon 90000000\nactive_file 1000\ninactive_file 4194304\n");
    CHECK(kiln_cgroup_read(&cg, &cpu, &mem));
    CHECK_MSG(cpu == 1500000ULL, "v2 cpu %llu", cpu);
    CHECK_MSG(mem == 104857600LL - 4194304LL, "v2 working set %lld", mem);
    /* cgroup v1: cpuacct.usage in ns; total_inactive_file (the hierarchy's,
     * not the cgroup's own inactive_file) */
    cg.cpu_v2 = cg.mem_v2 = false;
    put("cpuacct.usage", "2500000000\n");
    put("memory.usage_in_bytes", "50000\n");
    put("memory.stat", "inactive_file 100\ntotal_rss 1\ntotal_inactive_file 20000\n");
    CHECK(kiln_cgroup_read(&cg, &cpu, &mem));
    CHECK_MSG(cpu == 2500000ULL, "v1 cpu %llu", cpu);
    CHECK_MSG(mem == 30000, "v1 working set %lld", mem);
    /* more inactive than used (races between the two files): none */
    put("memory.stat", "total_inactive_file 90000\n");
    CHECK(kiln_cgroup_read(&cg, &cpu, &mem) && mem == 0);
    /* a cgroup that is gone (the container ended) */
    snprintf(cg.cpu, sizeof cg.cpu, "%s/gone", dir);
    CHECK(!kiln_cgroup_read(&cg, &cpu, &mem));
}

/* This process's own cgroup: found, and its CPU time grows with work. */
static void test_self(void)
{
    kiln_cgroup cg;
    CHECK_MSG(kiln_cgroup_of(getpid(), &cg), "no cgroup found for this process");
    unsigned long long a = 0, b = 0;
    long long mem = 0;
    CHECK(kiln_cgroup_read(&cg, &a, &mem));
    CHECK_MSG(mem > 0, "working set %lld", mem);
    volatile unsigned long x = 0;
    clock_t end = clock() + CLOCKS_PER_SEC / 5; /* 0.2 s of CPU */
    while (clock() < end)
        x++;
    CHECK(kiln_cgroup_read(&cg, &b, &mem));
    CHECK_MSG(b >= a + 100000, "cpu %llu -> %llu us after 0.2 s of work", a, b);
    CHECK(!kiln_cgroup_of(999999999, &cg));
}

static void test_pids(void)
{
    char script[128];
    kiln_exec_config cfg = {0};
    const char *names[] = {"kiln-p1-j-master-replica-0", "kiln-p1-j-worker-replica-0", "gone"};
    pid_t pids[3];
    snprintf(script, sizeof script, "%s/podman", dir);
    cfg.container_runtime = script;
    /* podman ps --format "{{.Names}} {{.Pid}}" */
    put("podman", "#!/bin/sh\necho \"other 5\"\necho \"kiln-p1-j-worker-replica-0 4321\"\n"
                  "echo \"kiln-p1-j-master-replica-0 1234\"\n");
    chmod(script, 0755);
    CHECK(kiln_exec_container_pids(&cfg, names, 3, pids, 5000) == 2);
    CHECK(pids[0] == 1234 && pids[1] == 4321 && pids[2] == 0);
    /* a podman that hangs: nothing found, within the bound */
    put("podman", "#!/bin/sh\necho \"kiln-p1-j-master-replica-0 1234\"\nexec sleep 30\n");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(kiln_exec_container_pids(&cfg, names, 3, pids, 300) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK_MSG(s < 2.0, "a hanging podman held the caller %.2f s", s);
    CHECK(pids[0] == 0);
    /* no runtime on this node */
    cfg.container_runtime = NULL;
    CHECK(kiln_exec_container_pids(&cfg, names, 3, pids, 300) == 0);
}

int main(int argc, char **argv)
{
    bool files = argc > 1 && strcmp(argv[1], "files") == 0;
    if (!files) kiln_test_need("cgroup"); /* exits 77 with the reason */
    snprintf(dir, sizeof dir, "/tmp/kiln-cgroup-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    if (files) {
        test_read();
        test_pids();
    } else {
        test_self();
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    TEST_DONE();
}

/* tests/service/test_podman_argv.c - the `podman run` command line of a
 * container replica (kiln__podman_argv, src/exec/container/podman.c) for
 * its securityContext (issue 41): allowPrivilegeEscalation: false is
 * --security-opt no-new-privileges, readOnlyRootFilesystem --read-only
 * without podman's tmpfs, capabilities.drop a --cap-drop each, all before
 * the image (after it they would be the program's arguments); without them
 * none of these appear. */
#include <stdio.h>
#include <string.h>

#include "exec/exec_int.h"
#include "kiln/exec.h"
#include "test.h"

/* The index of `a` (then `b`, when not NULL, right after it) in v, or -1. */
static long find(const kiln_strv *v, const char *a, const char *b)
{
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->v[i], a) == 0 && (!b || (i + 1 < v->n && strcmp(v->v[i + 1], b) == 0)))
            return (long)i;
    return -1;
}

static void argv_of(const kiln_exec_spec *spec, kiln_strv *prog)
{
    kiln_exec_config cfg = {.container_runtime = "/usr/bin/podman"};
    kiln_strv pull = {0}, exists = {0};
    CHECK(kiln__podman_argv(&cfg, spec, prog, &pull, &exists) == KILN_OK);
    kiln_strv_clear(&pull);
    kiln_strv_clear(&exists);
}

int main(void)
{
    kiln_strv argv = {0}, args = {0}, drop = {0};
    CHECK(kiln_strv_push(&drop, "ALL") == KILN_OK);
    CHECK(kiln_strv_push(&drop, "NET_RAW") == KILN_OK);
    kiln_exec_spec spec = {.kind = KILN_EXEC_CONTAINER,
                           .task = "master-replica-0",
                           .work_dir = "/tmp",
                           .argv = &argv,
                           .args = &args,
                           .image = "reg/t:1",
                           .name = "kiln-p-j-master-replica-0",
                           .uid = 1000,
                           .gid = 1000};

    /* none asked: none given */
    kiln_strv prog = {0};
    argv_of(&spec, &prog);
    CHECK(find(&prog, "--security-opt", NULL) < 0);
    CHECK(find(&prog, "--read-only", NULL) < 0);
    CHECK(find(&prog, "--cap-drop", NULL) < 0);
    CHECK(find(&prog, "--user", "1000:1000") >= 0);
    kiln_strv_clear(&prog);

    spec.no_new_privs = true;
    spec.read_only_root = true;
    spec.cap_drop = &drop;
    argv_of(&spec, &prog);
    long image = find(&prog, "reg/t:1", NULL);
    long nnp = find(&prog, "--security-opt", "no-new-privileges");
    long ro = find(&prog, "--read-only", NULL);
    long tmpfs = find(&prog, "--read-only-tmpfs=false", NULL);
    long all = find(&prog, "--cap-drop", "ALL"), raw = find(&prog, "--cap-drop", "NET_RAW");
    CHECK_MSG(nnp >= 0 && nnp < image, "--security-opt no-new-privileges before the image");
    CHECK_MSG(ro >= 0 && ro < image, "--read-only before the image");
    CHECK_MSG(tmpfs >= 0 && tmpfs < image, "no tmpfs on /tmp: only volumes are writable");
    CHECK_MSG(all >= 0 && all < image && raw >= 0 && raw < image, "--cap-drop for each");
    kiln_strv_clear(&prog);

    kiln_strv_clear(&drop);
    TEST_DONE();
}

/* test_gpu_names.c - what kiln calls the GPUs NVML names, discovery and the
 * GPU watch through the stand-in NVML (tests/nvml/fake_nvml.c):
 *   - every board of the last generations nvidia-smi names maps to its
 *     Vertex AI accelerator name, or to a name of its own by one rule
 *     (never a doubled NVIDIA_ prefix, never a substring match);
 *   - discovery reads names, UUIDs and memory, refuses a GPU in MIG mode
 *     with the reason, labels the node as NVIDIA's feature discovery does;
 *   - the watch reads telemetry, takes a GPU out on a fatal Xid (not on a
 *     program's own Xid 13), on a lost GPU, on a failed row remapping, and
 *     puts it back when cleared. */
#include "test.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln/devices.h"

static void test_names(void)
{
    static const char *const t[][2] = {
        /* Vertex AI's boards, as nvidia-smi names them */
        {"NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB"},
        {"NVIDIA H100 PCIe", "NVIDIA_H100_80GB"},
        {"NVIDIA H200", "NVIDIA_H200_141GB"},
        {"NVIDIA H200 NVL", "NVIDIA_H200_141GB"},
        {"NVIDIA A100-SXM4-40GB", "NVIDIA_TESLA_A100"},
        {"NVIDIA A100-PCIE-40GB", "NVIDIA_TESLA_A100"},
        {"A100-SXM4-40GB", "NVIDIA_TESLA_A100"},
        {"NVIDIA A100-SXM4-80GB", "NVIDIA_A100_80GB"},
        {"NVIDIA A100 80GB PCIe", "NVIDIA_A100_80GB"},
        {"NVIDIA L4", "NVIDIA_L4"},
        {"NVIDIA B200", "NVIDIA_B200"},
        {"NVIDIA GB200", "NVIDIA_GB200"},
        {"NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA_RTX_PRO_6000"},
        {"Tesla V100-SXM2-16GB", "NVIDIA_TESLA_V100"},
        {"Tesla V100S-PCIE-32GB", "NVIDIA_TESLA_V100"},
        {"Tesla T4", "NVIDIA_TESLA_T4"},
        {"Tesla P100-PCIE-16GB", "NVIDIA_TESLA_P100"},
        {"Tesla P4", "NVIDIA_TESLA_P4"},
        {"Tesla K80", "NVIDIA_TESLA_K80"},
        /* everything else: a name of its own, brand words dropped */
        {"NVIDIA H100 NVL", "NVIDIA_H100_NVL"},
        {"NVIDIA GH200 480GB", "NVIDIA_GH200_480GB"},
        {"NVIDIA L40S", "NVIDIA_L40S"},
        {"NVIDIA L40", "NVIDIA_L40"},
        {"NVIDIA GeForce RTX 4090", "NVIDIA_RTX_4090"},
        {"NVIDIA RTX 6000 Ada Generation", "NVIDIA_RTX_6000_ADA"},
        {"NVIDIA A10", "NVIDIA_A10"},
        {"NVIDIA A10G", "NVIDIA_A10G"},
        {"NVIDIA A30", "NVIDIA_A30"},
        {"NVIDIA A40", "NVIDIA_A40"},
        {"Tesla P40", "NVIDIA_TESLA_P40"}, /* not a P4 */
        {"Quadro RTX 8000", "NVIDIA_QUADRO_RTX_8000"},
        {"NVIDIA", "NVIDIA_GPU"},
    };
    char b[96];
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        const char *got = kiln_devices_type_of(t[i][0], b, sizeof b);
        CHECK_MSG(strcmp(got, t[i][1]) == 0, "%s -> %s, want %s", t[i][0], got, t[i][1]);
        CHECK_MSG(strncmp(got, "NVIDIA_NVIDIA", 13) != 0, "%s: doubled prefix", t[i][0]);
    }
    /* a long name is cut, never overrun */
    char small[12];
    CHECK(strlen(kiln_devices_type_of("NVIDIA GeForce RTX 4090 Laptop GPU", small, sizeof small)) <
          sizeof small);
    CHECK_STR(kiln_devices_product_label("NVIDIA H100 80GB HBM3", b, sizeof b),
              "NVIDIA-H100-80GB-HBM3");
    CHECK(kiln_devices_xid_fatal(79) && kiln_devices_xid_fatal(48) && kiln_devices_xid_fatal(63) &&
          kiln_devices_xid_fatal(64) && kiln_devices_xid_fatal(74) && kiln_devices_xid_fatal(94) &&
          kiln_devices_xid_fatal(95));
    CHECK(!kiln_devices_xid_fatal(13) && !kiln_devices_xid_fatal(31) &&
          !kiln_devices_xid_fatal(43));
    CHECK(strstr(kiln_devices_xid_meaning(79), "fallen off the bus") != NULL);
}

static char state_path[256], lib[PATH_MAX];

/* Replaces the stand-in's state file whole (rename: no call reads half). */
static void write_state(const char *text)
{
    char tmp[sizeof state_path + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", state_path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
    rename(tmp, state_path);
}

/* Waits up to 5 s for GPU i's failed flag to be `want`. */
static bool wait_failed(kiln_gpu_watch *w, size_t i, bool want, kiln_gpu_status *st)
{
    for (int k = 0; k < 250; k++) {
        if (kiln_gpu_watch_get(w, i, st) && st->failed == want) return true;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void test_discovery_and_watch(void)
{
    char self[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return;
    self[n] = '\0';
    *strrchr(self, '/') = '\0'; /* build/bin */
    snprintf(lib, sizeof lib, "%s/../lib/libkiln-fake-nvml.so", self);
    snprintf(state_path, sizeof state_path, "/tmp/kiln-test-nvml-%d", (int)getpid());
    setenv("KILN_FAKE_NVML_STATE", state_path, 1);
    const char *base = "0.name=NVIDIA H100 80GB HBM3\n0.uuid=GPU-00000000-aaaa\n0.util=87\n"
                       "0.fbused=1024\n0.power=312.5\n0.temp=41\n0.energy=5000\n"
                       "1.name=NVIDIA H100 80GB HBM3\n1.uuid=GPU-11111111-bbbb\n"
                       "2.name=NVIDIA A100-SXM4-80GB\n2.uuid=GPU-22222222-cccc\n2.mig=1\n";
    write_state(base);

    kiln_device *v = NULL;
    size_t nd = 0;
    char note[512];
    CHECK(kiln_devices_discover(lib, &v, &nd, note, sizeof note) == KILN_OK);
    CHECK_MSG(nd == 3, "%zu devices: %s", nd, note);
    if (nd == 3) {
        CHECK_STR(v[0].type, "NVIDIA_H100_80GB");
        CHECK_STR(v[0].uuid, "GPU-00000000-aaaa");
        CHECK_STR(v[0].model, "NVIDIA H100 80GB HBM3");
        CHECK(v[0].memory_gb > 79.0 && v[0].memory_gb < 80.0 && !v[0].refused && !v[0].simulated);
        CHECK(v[1].index == 1 && !v[1].refused);
        CHECK_STR(v[2].type, "NVIDIA_A100_80GB");
        CHECK(v[2].refused && strstr(v[2].refused, "MIG") != NULL);
    }
    CHECK(strstr(note, "3 GPUs") != NULL);

    /* a node of this machine: labels as NVIDIA's feature discovery and GKE */
    kiln_cluster c;
    kiln_diag d = KILN_DIAG_INIT;
    write_state("0.name=NVIDIA GeForce RTX 4090\n1.name=NVIDIA GeForce RTX 4090\n");
    CHECK(kiln_cluster_load(NULL, lib, &c, &d, note, sizeof note) == KILN_OK);
    if (c.n == 1 && c.nodes[0].n_devs == 2) {
        CHECK_STR(kiln_map_get(&c.nodes[0].labels, "nvidia.com/gpu.product"),
                  "NVIDIA-GeForce-RTX-4090");
        CHECK_STR(kiln_map_get(&c.nodes[0].labels, "cloud.google.com/gke-accelerator"),
                  "nvidia-rtx-4090");
        CHECK_STR(c.nodes[0].devs[1].uuid, "GPU-FAKE-1");
    } else {
        CHECK_MSG(0, "this machine: %zu nodes: %s", c.n, note);
    }
    kiln_cluster_free(&c);
    kiln_diag_free(&d);

    /* the watch */
    write_state(base);
    char why[256];
    kiln_gpu_watch *w = kiln_gpu_watch_start(lib, v, nd, 100, why, sizeof why);
    CHECK_MSG(w != NULL, "%s", why);
    if (!w) goto out;
    kiln_gpu_watch_events(w, why, sizeof why);
    CHECK_MSG(strstr(why, "registered on 3 of 3") != NULL, "%s", why);
    kiln_gpu_status st;
    uint64_t g0 = kiln_gpu_watch_sample_gen(w);
    for (int k = 0; k < 100 && kiln_gpu_watch_sample_gen(w) < g0 + 2; k++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    CHECK(kiln_gpu_watch_get(w, 0, &st));
    CHECK(st.have_util && st.util_gpu == 87 && st.have_memory && st.fb_used == 1024ull << 20);
    CHECK(st.have_power && st.power_w > 312.4 && st.power_w < 312.6 && st.temp_c == 41);
    CHECK(st.have_energy && st.energy_mj == 5000 && !st.failed);
    kiln_gpu_point pts[4];
    size_t np = kiln_gpu_watch_history(w, 0, pts, 4);
    CHECK(np >= 1 && pts[np - 1].util_gpu == 87.0f);

    /* a program's own Xid is recorded, not fatal; Xid 79 takes GPU 1 out */
    char more[1024];
    uint64_t h0 = kiln_gpu_watch_health_gen(w);
    snprintf(more, sizeof more, "%sxid=0:13\nxid=1:79\n", base);
    write_state(more);
    CHECK(wait_failed(w, 1, true, &st));
    CHECK_MSG(strstr(st.why, "Xid 79") && strstr(st.why, "fallen off the bus"), "%s", st.why);
    CHECK(st.last_xid == 79 && kiln_gpu_watch_health_gen(w) > h0);
    CHECK(kiln_gpu_watch_get(w, 0, &st) && !st.failed && st.last_xid == 13 && st.xids == 1);
    /* cleared: back in service (and stays: the event is not seen twice) */
    kiln_gpu_watch_clear(w, 1);
    CHECK(kiln_gpu_watch_get(w, 1, &st) && !st.failed && !st.why[0]);
    /* a GPU that stops answering */
    snprintf(more, sizeof more, "%sxid=0:13\nxid=1:79\n0.lost=1\n", base);
    write_state(more);
    CHECK(wait_failed(w, 0, true, &st));
    CHECK_MSG(strstr(st.why, "stopped answering") != NULL, "%s", st.why);
    CHECK(kiln_gpu_watch_get(w, 1, &st) && !st.failed);
    /* a failed row remapping */
    snprintf(more, sizeof more, "%sxid=0:13\nxid=1:79\n1.remap_failure=1\n", base);
    write_state(more);
    CHECK(wait_failed(w, 1, true, &st));
    CHECK_MSG(strstr(st.why, "row remapping failed") != NULL, "%s", st.why);
    kiln_gpu_watch_stop(w);

    /* no Xid registration (some VMs): polled, and said so */
    write_state("events=0\n0.name=NVIDIA L4\n");
    kiln_device one = {.type = "NVIDIA_L4", .uuid = "GPU-FAKE-0", .index = 0};
    w = kiln_gpu_watch_start(lib, &one, 1, 100, why, sizeof why);
    CHECK(w != NULL);
    kiln_gpu_watch_events(w, why, sizeof why);
    CHECK_MSG(strstr(why, "not available") && strstr(why, "polled"), "%s", why);
    kiln_gpu_watch_stop(w);
    /* nothing to open: no watch, and why */
    CHECK(kiln_gpu_watch_start("/nonexistent.so", &one, 1, 100, why, sizeof why) == NULL);
out:
    kiln_devices_free(v, nd);
    unlink(state_path);
}

/* MIG: instances discovered as devices after the whole GPUs (an empty slot
 * skipped), watched on their own and failing with their parent; an Xid
 * naming one GPU instance takes only that one out. */
static void test_mig(void)
{
    const char *base = "0.name=NVIDIA H100 80GB HBM3\n0.uuid=GPU-0\n"
                       "1.name=NVIDIA H100 80GB HBM3\n1.uuid=GPU-1\n1.mig=1\n"
                       "1.mig.devices=1g.10gb,1g.10gb+me,1c.3g.40gb\n1.mig.1.empty=1\n"
                       "1.mig.0.fbused=2048\n";
    char more[1024], note[512], why[256];
    kiln_device *v = NULL;
    size_t nd = 0;
    kiln_gpu_status st;
    write_state(base);
    CHECK(kiln_devices_discover(lib, &v, &nd, note, sizeof note) == KILN_OK);
    CHECK_MSG(nd == 4, "%zu devices: %s", nd, note);
    if (nd != 4) goto out;
    CHECK(!v[0].refused && !v[0].mig_profile && v[0].parent == -1);
    CHECK_MSG(v[1].refused && strstr(v[1].refused, "its 2 MIG instances") &&
                  strstr(v[1].refused, "devices 2 to 3"),
              "%s", v[1].refused ? v[1].refused : "(none)");
    CHECK_STR(v[2].type, "NVIDIA_MIG_1G_10GB");
    CHECK_STR(v[2].mig_profile, "1g.10gb");
    CHECK_STR(v[2].uuid, "MIG-FAKE-1-0");
    CHECK_STR(v[2].model, "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
    CHECK(v[2].parent == 1 && v[2].index == 2 && v[2].gpu_instance == 1 && !v[2].refused);
    CHECK(v[2].memory_gb > 9.99 && v[2].memory_gb < 10.01);
    CHECK_STR(v[3].type, "NVIDIA_MIG_1C_3G_40GB");
    CHECK(v[3].parent == 1 && v[3].gpu_instance == 3);
    /* no instance made yet: the reason says who makes them */
    write_state("0.name=NVIDIA H100 80GB HBM3\n0.mig=1\n");
    kiln_device *e = NULL;
    size_t ne = 0;
    CHECK(kiln_devices_discover(lib, &e, &ne, note, sizeof note) == KILN_OK);
    CHECK(ne == 1 && e[0].refused && strstr(e[0].refused, "no MIG instance") &&
          strstr(e[0].refused, "never changes MIG settings"));
    kiln_devices_free(e, ne);

    write_state(base);
    kiln_gpu_watch *w = kiln_gpu_watch_start(lib, v, nd, 100, why, sizeof why);
    CHECK_MSG(w != NULL, "%s", why);
    if (!w) goto out;
    kiln_gpu_watch_events(w, why, sizeof why);
    CHECK_MSG(strstr(why, "registered on 2 of 2") != NULL, "%s", why); /* whole GPUs */
    uint64_t g0 = kiln_gpu_watch_sample_gen(w);
    for (int k = 0; k < 100 && kiln_gpu_watch_sample_gen(w) < g0 + 2; k++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    CHECK(kiln_gpu_watch_get(w, 2, &st));
    CHECK(st.have_memory && st.fb_used == 2048ull << 20 && st.fb_total == 10240ull << 20);
    CHECK(!st.have_util && !st.failed); /* the board's, not the instance's */
    /* one instance's Xid 94: that one only */
    snprintf(more, sizeof more, "%sxid=1/3:94\n", base);
    write_state(more);
    CHECK(wait_failed(w, 3, true, &st));
    CHECK_MSG(strstr(st.why, "Xid 94"), "%s", st.why);
    CHECK(kiln_gpu_watch_get(w, 2, &st) && !st.failed);
    CHECK(kiln_gpu_watch_get(w, 1, &st) && !st.failed);
    kiln_gpu_watch_clear(w, 3);
    /* an Xid 79 on the parent: every instance out, with the reason */
    snprintf(more, sizeof more, "%sxid=1/3:94\nxid=1:79\n", base);
    write_state(more);
    CHECK(wait_failed(w, 2, true, &st));
    CHECK_MSG(strstr(st.why, "its GPU (GPU-1) is out of service: Xid 79"), "%s", st.why);
    CHECK(wait_failed(w, 3, true, &st));
    CHECK(kiln_gpu_watch_get(w, 0, &st) && !st.failed);
    /* the parent back in service brings its instances back */
    kiln_gpu_watch_clear(w, 1);
    CHECK(kiln_gpu_watch_get(w, 2, &st) && !st.failed);
    CHECK(kiln_gpu_watch_get(w, 3, &st) && !st.failed);
    kiln_gpu_watch_stop(w);
out:
    kiln_devices_free(v, nd);
    unlink(state_path);
}

/* Topology through the stand-in: direct NVLinks by the remote's PCI bus id,
 * NVSwitch links as the fewer of the two GPUs', common ancestors, NUMA. */
static void test_topology(void)
{
    write_state("0.name=NVIDIA H100 80GB HBM3\n1.name=NVIDIA H100 80GB HBM3\n"
                "2.name=NVIDIA H100 80GB HBM3\n3.name=NVIDIA H100 80GB HBM3\n"
                "nvlink.0.1=4\ntopo.0.1=PIX\ntopo.0.2=SYS\ntopo.0.3=NODE\ntopo.1.2=PXB\n"
                "2.nvswitch=18\n3.nvswitch=12\n0.numa=0\n1.numa=1\n");
    kiln_device *v = NULL;
    size_t nd = 0;
    char note[512], b[16];
    CHECK(kiln_devices_discover(lib, &v, &nd, note, sizeof note) == KILN_OK);
    CHECK_MSG(nd == 4 && v[0].links && v[3].links, "%zu devices: %s", nd, note);
    if (nd == 4 && v[0].links && v[3].links) {
        CHECK_STR(kiln_devices_link_name(&v[0].links[1], b, sizeof b), "NV4");
        CHECK_STR(kiln_devices_link_name(&v[1].links[0], b, sizeof b), "NV4");
        CHECK_STR(kiln_devices_link_name(&v[0].links[2], b, sizeof b), "SYS");
        CHECK_STR(kiln_devices_link_name(&v[0].links[3], b, sizeof b), "NODE");
        CHECK_STR(kiln_devices_link_name(&v[1].links[2], b, sizeof b), "PXB");
        CHECK_STR(kiln_devices_link_name(&v[1].links[3], b, sizeof b), "PHB"); /* default */
        CHECK_STR(kiln_devices_link_name(&v[2].links[3], b, sizeof b), "NV12");
        CHECK_STR(kiln_devices_link_name(&v[3].links[2], b, sizeof b), "NV12");
        CHECK(v[0].links[1].level == KILN_TOPO_SINGLE && v[0].links[0].level == 0);
        CHECK(v[0].numa_node == 0 && v[1].numa_node == 1 && v[2].numa_node == -1);
    }
    kiln_devices_free(v, nd);
    unlink(state_path);
}

int main(void)
{
    test_names();
    test_discovery_and_watch();
    test_mig();
    test_topology();
    TEST_DONE();
}

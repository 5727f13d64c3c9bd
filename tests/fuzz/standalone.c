/* Runs a libFuzzer target over files and directories without libFuzzer, so
 * every ordinary build (gcc, sanitizers) replays the seed corpus as a test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint8_t *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    if (!buf) return -1;
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int run_path(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    DIR *dir = opendir(path);
    struct dirent *e;
    int rc = 0;
    if (!dir) return -1;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (run_path(sub, count) != 0) rc = -1;
    }
    closedir(dir);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0, rc = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count) != 0) rc = 1;
    printf("replayed %d inputs\n", count);
    if (count == 0) {
        fprintf(stderr, "no inputs found: the corpus is missing\n");
        return 1;
    }
    return rc;
}

/* replay.c -- main() for a fuzz target outside libFuzzer: feeds every file
 * of the directories (or the files) named on the command line to
 * LLVMFuzzerTestOneInput, one at a time, in name order.
 *
 * Built with gcc into fuzz_<name>_replay (test/fuzz/CMakeLists.txt) and run
 * by ctest on corpus/<name>/, so the plain and ASan builds replay every seed
 * and every crash regression input. A crash or sanitizer report ends the
 * process (the test fails); exit 1 also when a directory holds no input, so
 * a corpus that went missing is not a silent pass. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads path whole into a malloc'ed buffer (a byte more, so never malloc(0)). */
static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *grown = realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int run_file(const char *path)
{
    size_t len = 0;
    uint8_t *data = read_all(path, &len);
    if (!data) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno ? errno : ENOMEM));
        return -1;
    }
    /* The copy is exactly len bytes, so ASan sees a read past the input. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(data);
        return -1;
    }
    memcpy(exact, data, len);
    free(data);
    (void)LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int run_dir(const char *dir, size_t *count)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name);
    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        int w = snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        if (w > 0 && (size_t)w < sizeof(path) && names[i]->d_name[0] != '.' &&
            stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path) < 0)
                rc = -1;
            else
                ++*count;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
        return 2;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        size_t count = 0;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            if (run_dir(argv[i], &count) < 0)
                rc = 1;
            if (count == 0) {
                fprintf(stderr, "replay: %s: no input\n", argv[i]);
                rc = 1;
            }
        } else if (run_file(argv[i]) < 0) {
            rc = 1;
        } else {
            count = 1;
        }
        printf("replay: %s: %zu inputs\n", argv[i], count);
    }
    return rc;
}

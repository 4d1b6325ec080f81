/* fuzz_gpumem_ledger.c -- the gpu-mem ledger's files (gpumem_ledger.c):
 * <state-dir>/gpumem/<pod UID> holding the answered Allocate calls. The
 * input is one entry's contents; its first line, when it looks like a file
 * name, also names a second entry holding the rest. Then the ledger is
 * opened (loading every entry), read, updated, pruned and closed. The state
 * directory is made under $TMPDIR once per process and emptied per input. */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpumem_ledger.h"
#include "fuzz_util.h"

#define UID "6f1d2a3b-0c4e-4f5a-9b8c-7d6e5f4a3b2c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char state[4000], entries[4100];

static void write_entry(const char *name, const uint8_t *data, size_t size)
{
    char path[8300];
    snprintf(path, sizeof(path), "%s/%s", entries, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) {
        perror(path);
        abort();
    }
    close(fd);
}

static void empty_entries(void)
{
    DIR *d = opendir(entries);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            (void)unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
}

static bool keep_odd(void *ctx, const char *uid)
{
    (void)ctx;
    return strlen(uid) % 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    if (!state[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(state, sizeof(state), "%s/gpupool-fuzz-ledger.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(state)) {
            perror("mkdtemp");
            abort();
        }
        snprintf(entries, sizeof(entries), "%s/gpumem", state);
        if (mkdir(entries, 0700) != 0) {
            perror(entries);
            abort();
        }
    }
    empty_entries();
    write_entry(UID, data, size);
    const uint8_t *nl = memchr(data, '\n', size);
    size_t n = nl ? (size_t)(nl - data) : 0;
    if (n > 0 && n < 100 && !memchr(data, '/', n) && !memchr(data, '\0', n)) {
        char name[128];
        memcpy(name, data, n);
        name[n] = '\0';
        if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
            write_entry(name, nl + 1, size - n - 1);
    }

    struct gpumem_ledger *l;
    char err[1024];
    if (gpumem_ledger_open(state, &l, err, sizeof(err)) < 0)
        return 0;
    size_t count = gpumem_ledger_count(l);
    for (size_t i = 0; i < count; i++) {
        const char *uid = gpumem_ledger_uid(l, i);
        if (!uid)
            abort();
        (void)gpumem_ledger_get(l, uid);
    }
    unsigned calls = gpumem_ledger_get(l, UID);
    if (gpumem_ledger_set(l, UID, calls + 1, err, sizeof(err)) == 0 &&
        gpumem_ledger_get(l, UID) != calls + 1)
        abort(); /* what was set is what is read */
    (void)gpumem_ledger_prune(l, keep_odd, NULL);
    gpumem_ledger_close(l);
    return 0;
}

/* footprint.c -- drop unused program text from the resident set. */
#include "footprint.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* One /proc/self/maps line: "lo-hi perms offset dev inode path". Only
 * private, read+execute, non-writable mappings of a file qualify. */
static int parse_text_mapping(const char *line, uintptr_t *lo, uintptr_t *hi)
{
    char perms[8];
    if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", lo, hi, perms) != 3)
        return 0;
    if (strcmp(perms, "r-xp") != 0)
        return 0;
    const char *path = strchr(line, '/');
    return path != NULL && *hi > *lo;
}

int footprint_trim_text(void)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL)
        return -1;
    char line[1024];
    int advised = 0;
    while (fgets(line, sizeof line, maps) != NULL) {
        uintptr_t lo, hi;
        if (!parse_text_mapping(line, &lo, &hi))
            continue;
        void *addr = (void *)lo;
        size_t len = hi - lo;
        if (madvise(addr, len, MADV_RANDOM) == 0 && madvise(addr, len, MADV_DONTNEED) == 0)
            advised++;
    }
    fclose(maps);
    return advised;
}


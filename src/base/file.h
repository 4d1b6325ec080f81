/* file.h -- replacing a file whole: readers see the old contents or the new,
 * never a part (a temporary file beside it, then rename(2)).
 *
 * Used for every file the device plugin keeps for others to read: the CDI
 * spec, the gpu-mem ledger, the isolation library and its preload file.
 * Threads: safe for different paths; one writer per path at a time (the
 * temporary name is fixed, so a crash leaves at most one leftover, which the
 * next write replaces). */
#ifndef GP_FILE_H
#define GP_FILE_H

#include <stddef.h>
#include <sys/types.h>

#define FILE_REPLACE_SYNC 0x1 /* fsync before the rename (survives a power cut) */
#define FILE_REPLACE_NO_TEMP (-2)

/* path := data[0..len), mode exactly (past the umask), through
 * "<dir>/.<name>.tmp". 0 on success. On failure errno is set and nothing is
 * left behind but the old file: FILE_REPLACE_NO_TEMP when the temporary file
 * could not be created (the directory is missing, not one, or not
 * writable), -1 when writing, syncing or renaming it failed. A symlink at the
 * temporary name is not followed. */
int file_replace(const char *path, const void *data, size_t len, mode_t mode, unsigned flags);

/* How many file_replace() calls of this process failed (a full disk, a
 * read-only directory, ...): the metric that says the node's own files are
 * not being kept. Thread-safe. */
unsigned long long file_replace_failures(void);

#endif

/* cuda_region.h -- one container's use of one GPU, shared by all its
 * processes through a small mapped file (docs/isolation.md, "The region").
 *
 * The file holds the limit and one slot per process with what that process
 * holds. A charge and a release touch only the process's own share, with
 * atomics and no lock (cuda_region.c, charge_fast, says why no two
 * processes can both take the last bytes); the container's use is the sum
 * of the shares. Claiming and freeing slots happen under one robust,
 * process-shared mutex: a process killed inside it (SIGKILL included) leaves
 * it to the next locker with EOWNERDEAD, so nothing is ever wedged or lost.
 *
 * A slot is live while its process holds a write lock on the slot's first
 * byte through an open file description of the region (F_OFD_SETLK). The
 * kernel drops that lock when the process exits, is killed or execs, in any
 * pid namespace, and keeps it while any thread of the process lives; so a
 * used slot whose byte nobody locks is dead, and its bytes are given back:
 * at attach, when a charge would otherwise be refused, and at most every
 * 250 ms by a report (cudareg_usage). On a kernel without OFD locks a slot
 * falls back to being judged by its pid, and is never freed while that pid
 * may still be its process.
 *
 * Threads: every function is safe from any thread of any process that has
 * the region mapped. A struct cudareg belongs to the process that attached
 * it (shared by its threads and inherited by fork, see cudareg_after_fork). */
#ifndef GP_CUDA_REGION_H
#define GP_CUDA_REGION_H

#include <stddef.h>
#include <stdint.h>

#define CUDAREG_SLOTS 1024

struct cudareg;

/* Maps the region at path, creating it with `limit` bytes when it does not
 * exist (0666, so every user of the container can share it); an existing
 * region keeps the limit it was created with, and this process is held to
 * the smaller of that and its own `limit`. A region left by an older layout
 * version belongs to a container instance that is gone and is made anew.
 * Gives back the charges of processes that are gone before returning. NULL
 * with a reason in err when the file cannot be created or mapped, or is not
 * a region of this or an older version. */
struct cudareg *cudareg_attach(const char *path, int64_t limit, char *err, size_t errlen);

/* Unmaps the region after giving back whatever this process still holds in
 * it (the process is exiting or no longer uses the GPU). NULL is a no-op. */
void cudareg_detach(struct cudareg *r);

/* The limit this process is held to, in bytes: the smaller of the region's
 * (its creator's) and the one this process attached with. */
int64_t cudareg_limit(const struct cudareg *r);

/* Charges bytes to this process if the container stays within the limit.
 * 0: charged. 1: it would exceed the limit (nothing charged). -1: this
 * process cannot get a slot (all CUDAREG_SLOTS held by live processes). */
int cudareg_reserve(struct cudareg *r, int64_t bytes);

/* Gives back bytes this process charged earlier. */
void cudareg_release(struct cudareg *r, int64_t bytes);

/* The container's use in bytes: the sum of the shares, without a lock;
 * the charges of processes that died are gone from it within 250 ms of the
 * previous report (any process's) that looked. */
int64_t cudareg_usage(struct cudareg *r);

/* In a forked child: the child holds nothing yet and needs its own slot. It
 * lets go of the descriptor shared with the parent (whose lock keeps the
 * parent's slot alive) and opens its own at its first charge. */
void cudareg_after_fork(struct cudareg *r);

/* The size of the mapping in bytes (fixed by the layout version). */
size_t cudareg_file_size(void);

/* ---- reading a region from outside (the node agent's metrics) ----------- */

/* One used slot as the file says: the pid in the process's own pid
 * namespace, that namespace's inode (0 when the process could not read it)
 * and the bytes it holds. */
struct cudareg_slot_view {
    int32_t pid;
    uint32_t pidns;
    int64_t used;
};

/* What a region's bytes say. used: the sum of the used slots (each read
 * once, negative ones as 0), not the file's running total, so a process
 * that writes the total alone changes nothing here; limit: the creator's. */
struct cudareg_view {
    int64_t limit;
    int64_t used;
    unsigned live_slots;
};

/* How many leading bytes of a region file cudareg_peek needs: the header
 * and the slots below its high mark (the only ones that can hold bytes),
 * read from the len bytes at head; 0 when they are fewer than the header
 * or not a region header of this layout version. A reader preads a first
 * CUDAREG_PEEK_FIRST bytes, then the rest of this size if more. */
#define CUDAREG_PEEK_FIRST 512
size_t cudareg_peek_size(const void *head, size_t len);

/* Reads a copy of a region file's leading bytes (len of them, at least the
 * header, at most the whole file): a pure function that takes no lock and
 * trusts nothing, so a damaged or hostile file can only give wrong figures
 * for its own container, never wedge or crash the reader. each (may be
 * NULL) is called for every used slot below the high mark that the bytes
 * cover. 0, or -1 when the bytes are not a ready region of this layout
 * version. */
int cudareg_peek(const void *bytes, size_t len, struct cudareg_view *out,
                 void (*each)(void *ctx, const struct cudareg_slot_view *slot), void *ctx);

/* cudareg_peek, and when fd (the region file, opened read-only: no lock is
 * taken, F_OFD_GETLK only asks) is not -1, slots whose liveness lock no
 * process holds are left out: their process is gone, and its charge waits
 * for a process of the container to reap it. Slots judged by pid (a kernel
 * without OFD locks) are counted. */
int cudareg_peek_live(const void *bytes, size_t len, int fd, struct cudareg_view *out,
                      void (*each)(void *ctx, const struct cudareg_slot_view *slot), void *ctx);

/* The live slots of this process's pid namespace (the container's
 * processes, as the library charged them), dead ones given back first:
 * up to max copied into out; the number there is returned (may exceed
 * max). Reads the mapping without the lock (cudareg_peek). */
size_t cudareg_own_processes(struct cudareg *r, struct cudareg_slot_view *out, size_t max);

#endif

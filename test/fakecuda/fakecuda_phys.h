/* fakecuda_phys.h -- the physical-use file that FAKECUDA_PHYS names: what
 * every live process using the fake driver holds on each GPU, and the peak.
 *
 * One small shared file, fixed layout (README.md, "Physical use"):
 *
 *   offset 0     header: magic "FCPHYS01", version 1, slot count, device count
 *   offset 24    16 devices x 64 bytes: UUID (48 bytes, NUL-padded),
 *                current (bytes over live slots), peak (highest current seen)
 *   offset 1048  FC_PHYS_SLOTS slots x 136 bytes: held bytes per device
 *                (16 x u64), pid (i32, informative), in_use (u32)
 *
 * Liveness: a process owns its slot by an open-file-description write lock
 * (F_OFD_SETLK) on the slot's first byte, through a descriptor opened
 * O_CLOEXEC; the kernel drops it when the process exits, is killed or execs,
 * whatever its pid namespace, and a pid of a dead slot means nothing. Every
 * update of the shared numbers holds an OFD write lock on byte 0 of the file.
 * A slot whose lock is free but that is marked in use belongs to a dead
 * process: its bytes leave `current` when a live process next looks. The
 * lock lives as long as the open file description, and a MAP_SHARED mapping
 * holds that as much as a descriptor: a forked child must drop both.
 *
 * Threads: a struct fc_phys is not thread-safe (the driver calls it under its
 * own mutex; the tool is single-threaded). Errors: -1 with a message in
 * `why`; the file is never left half-updated by this process. */
#ifndef GP_FAKECUDA_PHYS_H
#define GP_FAKECUDA_PHYS_H

#include <stddef.h>
#include <stdint.h>

#define FC_PHYS_MAGIC "FCPHYS01"
#define FC_PHYS_VERSION 1u
#define FC_PHYS_DEVICES 16
#define FC_PHYS_SLOTS 4096
#define FC_PHYS_UUID 48

struct fc_phys_dev {
    char uuid[FC_PHYS_UUID];
    uint64_t current;
    uint64_t peak;
};

struct fc_phys_slot {
    uint64_t held[FC_PHYS_DEVICES];
    int32_t pid;
    uint32_t in_use;
};

struct fc_phys_file {
    char magic[8];
    uint32_t version;
    uint32_t nslots;
    uint32_t ndev;
    uint32_t reserved;
    struct fc_phys_dev dev[FC_PHYS_DEVICES];
    struct fc_phys_slot slot[FC_PHYS_SLOTS];
};

_Static_assert(sizeof(struct fc_phys_dev) == 64, "device record layout");
_Static_assert(sizeof(struct fc_phys_slot) == 136, "slot layout");
_Static_assert(offsetof(struct fc_phys_file, dev) == 24, "device table offset");
_Static_assert(offsetof(struct fc_phys_file, slot) == 1048, "slot table offset");

/* One process's (or the tool's) view of the file. */
struct fc_phys {
    char *path;               /* owned copy: a forked child reopens it */
    int fd;                   /* -1: not open */
    struct fc_phys_file *f;   /* the shared mapping */
    int slot;                 /* -1: none claimed (the tool never claims one) */
    int map[FC_PHYS_DEVICES]; /* the caller's device i -> file device index */
};

/* Opens (creating it 0666 if missing) and maps the file; no slot yet. */
int fc_phys_open(struct fc_phys *p, const char *path, char *why, size_t whylen);

/* Takes a free or dead slot for this process and registers its devices by
 * UUID (appended to the file's table when new): map[i] is uuids[i]'s index. */
int fc_phys_claim(struct fc_phys *p, const char (*uuids)[FC_PHYS_UUID], int ndev, char *why,
                  size_t whylen);

/* This process now holds `delta` bytes more (delta > 0) or fewer on its
 * device `dev`. A growth that would take the device's current past `total`
 * is refused: 1, nothing changes. 0 on success, -1 on an I/O error. */
int fc_phys_charge(struct fc_phys *p, int dev, int64_t delta, uint64_t total);

/* The live current of the caller's device `dev` (dead slots dropped first). */
int fc_phys_current(struct fc_phys *p, int dev, uint64_t *current);

/* Drops dead slots and recomputes every device's current from the live
 * ones; with reset_peak, the peak becomes the current. Copies the device
 * table out (the tool's view). */
int fc_phys_snapshot(struct fc_phys *p, int reset_peak, struct fc_phys_dev *out, uint32_t *ndev);

/* Unmaps and closes (the slot, if any, dies with the descriptor). */
void fc_phys_close(struct fc_phys *p);

/* In a forked child: the inherited descriptor and mapping both hold the
 * parent's open file description, and so its slot's lock; the child drops
 * them (unmap, close: the parent keeps its slot) and fc_phys_claim later
 * opens and maps the path afresh. Also undoes a failed open. */
void fc_phys_forget(struct fc_phys *p);

#endif

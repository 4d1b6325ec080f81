/* cuda_account.h -- what the wrappers of every API family share: the
 * process's limits, which CUDA device (and NVML device) is limited, the
 * region each one charges, and the charge / give-back steps around a driver
 * call (docs/isolation.md, "Accounting that cannot over-commit").
 *
 * Threads: every function is safe from any thread. The per-device state is
 * decided once per device under one lock and read without it afterwards. */
#ifndef GP_CUDA_ACCOUNT_H
#define GP_CUDA_ACCOUNT_H

#include "cuda_abi.h"
#include "cuda_config.h"
#include "cuda_hooks.h"
#include "cuda_ledger.h"
#include "cuda_region.h"

#include <stdbool.h>
#include <stddef.h>

/* The limits read from the environment when the library was loaded. */
extern struct cudacfg cuda_cfg;

/* True when this process enforces a limit (any limit variable was set). */
bool cuda_hooks_active(void);

/* One line on stderr per distinct reason ("gpupool-cuda: ..."). */
void cuda_complain(const char *fmt, const char *a, const char *b);

/* The answer of every allocating call while a limit cannot be understood. */
CUresult cuda_refuse_broken(void);

enum cuda_dev_state { DEV_UNKNOWN, DEV_FREE, DEV_LIMITED, DEV_FAILED };

/* Decides, once, whether CUDA ordinal dev is limited and maps its region. */
int cuda_device_state(CUdevice dev);

/* The region of a limited device (cuda_device_state() == DEV_LIMITED). */
struct cudareg *cuda_device_region(CUdevice dev);

/* A CUDA UUID as NVML and the region names write it: "GPU-xxxxxxxx-...". */
void cuda_uuid_text(const CUuuid *u, char *out, size_t len);

/* The device of the calling thread's current context (and the context in
 * *ctx when not NULL); -1 without one. */
CUdevice cuda_current_device(CUcontext *ctx);

/* The device of a context, current or not; -1 when the driver cannot say. */
CUdevice cuda_context_device(CUcontext ctx);

/* Charges bytes on dev before the driver is asked. *reg: the region
 * charged, NULL when dev has no limit (nothing to undo or record).
 * CUDA_ERROR_OUT_OF_MEMORY past the limit. */
CUresult cuda_charge(CUdevice dev, size_t bytes, struct cudareg **reg);

/* Gives an entry's bytes back to its device's region (a ledger callback). */
void cuda_give_back(const struct cudaledger_entry *e, void *arg);

/* After the driver answered a charged allocation: a failure gives the
 * charge back; a success is recorded (out: where the driver wrote the
 * pointer or handle, read only then). If the ledger cannot grow, the
 * allocation is undone and the caller sees out of memory. reg NULL:
 * nothing was charged. */
CUresult cuda_settle_alloc(CUresult rc, struct cudareg *reg, enum cudaledger_kind kind,
                           const void *out, CUcontext ctx, CUdevice dev, size_t bytes);

/* Records a charged allocation the driver made (e->bytes charged to reg).
 * -1 when the ledger cannot grow: the charge is given back, and the caller
 * must undo the allocation. */
int cuda_record(struct cudareg *reg, const struct cudaledger_entry *e);

/* After the driver's free succeeded or failed: give back, or put back. */
void cuda_settle_free(CUresult rc, bool had, const struct cudaledger_entry *e);

/* The region of an NVML device, by its UUID; NULL when it has no limit.
 * *refuse: a limit is set but cannot be enforced. */
struct cudareg *cuda_nvml_region(nvmlDevice_t device, unsigned long long total, bool *refuse);

/* A free of something the ledger may hold: out of the ledger first (a
 * concurrent allocation that gets the same handle back cannot be confused
 * with it), then the driver, then given back -- or put back if the driver
 * refused the free. */
#define FREE_TRACKED(kind, handle, call)                    \
    do {                                                    \
        struct cudaledger_entry e_;                         \
        bool had_ = cudaledger_take((kind), (handle), &e_); \
        CUresult rc_ = (call);                              \
        cuda_settle_free(rc_, had_, &e_);                   \
        return rc_;                                         \
    } while (0)

/* The driver's entry point is needed: without a driver, NOT_INITIALIZED. */
#define NEED(fn)                                   \
    do {                                           \
        if (!cuda_real_ready() || real.fn == NULL) \
            return CUDA_ERROR_NOT_INITIALIZED;     \
    } while (0)

/* An allocating entry point: also refused outright while the limit cannot
 * be understood, whatever its arguments. */
#define NEED_ALLOC(fn)                        \
    do {                                      \
        NEED(fn);                             \
        if (cuda_cfg.state == CUDACFG_BROKEN) \
            return cuda_refuse_broken();      \
    } while (0)

#endif

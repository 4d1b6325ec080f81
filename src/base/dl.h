/* dl.h -- loading a shared library at run time and binding a symbol table.
 *
 * Programs dlopen the libraries they need only sometimes (NVML, libcurl,
 * libmicrohttpd, next libcuda), so that none becomes NEEDED and a missing
 * one fails with a message instead of the program not starting. Every
 * loader is the same three steps: try candidate names in order, dlsym a
 * table of (names, slot) entries built from the caller's X-macro list, and
 * say which library or symbol was missing with the dlerror() text.
 *
 *     static const char *const init[] = {"nvmlInit_v2", "nvmlInit", NULL};
 *     struct dl_symbol table[] = {{init, &api.Init, &api.bound_init, true}, ...};
 *     if (dl_open(&lib, names, n, RTLD_NOW | RTLD_LOCAL, err, errlen) != 0 ||
 *         dl_bind(&lib, table, ntable, NULL, err, errlen) != 0) ...
 *
 * Errors: 0 / -1 with a message in err; lib->error keeps the last dlerror()
 * text and lib->tried what was attempted, for callers that word their own
 * message (which package to install). Never logs.
 * Ownership: the caller owns the struct dl_library; dl_close() is
 * idempotent. Threads: dlopen/dlerror are process-wide: load from one
 * thread at a time (dlerror() is read right after each call). */
#ifndef GP_DL_H
#define GP_DL_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler.h"
#include "errmsg.h"

struct dl_symbol {
    const char *const *names; /* NULL-terminated; the first one exported is bound */
    void *slot;               /* address of the function pointer to fill */
    const char **bound;       /* NULL, or gets the name bound (NULL when none) */
    bool required;
};

struct dl_library {
    void *handle;           /* NULL until loaded */
    char path[4096];        /* the name that loaded */
    char tried[2048];       /* "a; b": the names passed to dlopen */
    char error[GP_ERR_LEN]; /* the last dlerror() text */
};

/* Tries names[0..n) in order and keeps the first that loads. A name with a
 * '/' whose file does not exist is skipped (and not listed in tried),
 * unless it is the last, so lib->error is about a file that exists but
 * fails (wrong architecture, a missing dependency). -1: err = "cannot load <tried>: <dlerror>". */
GP_MUST_USE int dl_open(struct dl_library *lib, const char *const *names, size_t n, int flags,
                        char *err, size_t errlen);

/* Binds every entry of table. A missing optional symbol leaves its slot
 * NULL. -1 at the first missing required one: *missing (when not NULL) =
 * its first name, err = "<path> has no <name>". */
GP_MUST_USE int dl_bind(struct dl_library *lib, const struct dl_symbol *table, size_t n,
                        const char **missing, char *err, size_t errlen);

/* dlclose once; 0, or -1 with the dlerror() text in err. NULL handle: 0. */
int dl_close(struct dl_library *lib, char *err, size_t errlen);

#endif

/* dl.c -- candidate names, symbol tables, dlerror() capture (see dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Keeps the text of the failure that just happened (dlerror() clears it). */
static void keep_dlerror(struct dl_library *lib)
{
    const char *why = dlerror();
    snprintf(lib->error, sizeof lib->error, "%s", why != NULL ? why : "unknown error");
}

/* Appends to the "a; b" list, truncating quietly: it only helps a human. */
static void append_tried(char *tried, size_t triedlen, const char *what)
{
    size_t used = strlen(tried), sep = used ? 2 : 0, n = strlen(what);
    if (used + sep + n + 1 > triedlen)
        return;
    memcpy(tried + used, "; ", sep);
    memcpy(tried + used + sep, what, n + 1);
}

int dl_open(struct dl_library *lib, const char *const *names, size_t n, int flags, char *err,
            size_t errlen)
{
    memset(lib, 0, sizeof *lib);
    snprintf(lib->error, sizeof lib->error, "no library name to try");
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && strchr(names[i], '/') != NULL && access(names[i], F_OK) != 0)
            continue;
        append_tried(lib->tried, sizeof lib->tried, names[i]);
        dlerror(); /* a stale message must not be taken for this call's */
        lib->handle = dlopen(names[i], flags);
        if (lib->handle != NULL) {
            snprintf(lib->path, sizeof lib->path, "%s", names[i]);
            lib->error[0] = '\0';
            return 0;
        }
        keep_dlerror(lib);
    }
    return gp_errf(err, errlen, "cannot load %s: %s", lib->tried[0] ? lib->tried : "a library",
                   lib->error);
}

int dl_bind(struct dl_library *lib, const struct dl_symbol *table, size_t n, const char **missing,
            char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        const struct dl_symbol *s = &table[i];
        void *fn = NULL;
        const char *bound = NULL;
        for (size_t c = 0; fn == NULL && s->names[c] != NULL; c++) {
            dlerror();
            fn = dlsym(lib->handle, s->names[c]);
            if (fn != NULL)
                bound = s->names[c];
            else
                keep_dlerror(lib);
        }
        /* POSIX guarantees that object and function pointers convert. */
        memcpy(s->slot, &fn, sizeof fn);
        if (s->bound != NULL)
            *s->bound = bound;
        if (fn == NULL && s->required) {
            if (missing != NULL)
                *missing = s->names[0];
            return gp_errf(err, errlen, "%s has no %s", lib->path, s->names[0]);
        }
    }
    return 0;
}

int dl_close(struct dl_library *lib, char *err, size_t errlen)
{
    if (lib->handle == NULL)
        return 0;
    dlerror();
    int rc = dlclose(lib->handle);
    lib->handle = NULL;
    if (rc != 0) {
        keep_dlerror(lib);
        return gp_errf(err, errlen, "dlclose(%s) failed: %s", lib->path, lib->error);
    }
    return 0;
}

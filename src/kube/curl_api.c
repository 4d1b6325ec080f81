/* curl_api.c -- dlopen loader for libcurl (see curl_api.h). */
#include "curl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dl.h"
#include "errmsg.h"

int kube_curl_open(const char *soname, struct kube_curl *api, void **library, char *err,
                   size_t errlen)
{
    memset(api, 0, sizeof *api);
    *library = NULL;
    /* RTLD_LOCAL: curl's symbols (and OpenSSL's) stay out of the global
     * namespace, where they could interpose on another copy a program
     * loads. RTLD_NOW: a broken install fails here, not mid-request. */
    struct dl_library lib;
    char why[GP_ERR_LEN];
    if (dl_open(&lib, &soname, 1, RTLD_NOW | RTLD_LOCAL, why, sizeof why) != 0)
        return gp_errf(err, errlen, "%s (install libcurl4)", lib.error);
#define KUBE_CURL_NAMES(name) static const char *const name##_names[] = {"curl_" #name, NULL};
    KUBE_CURL_FUNCTIONS(KUBE_CURL_NAMES)
#undef KUBE_CURL_NAMES
    const struct dl_symbol table[] = {
#define KUBE_CURL_SYMBOL(name) {name##_names, &api->name, NULL, true},
        KUBE_CURL_FUNCTIONS(KUBE_CURL_SYMBOL)
#undef KUBE_CURL_SYMBOL
    };
    const char *missing = NULL;
    if (dl_bind(&lib, table, sizeof table / sizeof table[0], &missing, why, sizeof why) != 0) {
        /* Nothing to say beyond the missing symbol if dlclose fails too. */
        if (dl_close(&lib, why, sizeof why) != 0)
            why[0] = '\0';
        memset(api, 0, sizeof *api);
        return gp_errf(err, errlen,
                       "%s has no %s: it is not libcurl, or older than 7.68 (install libcurl4)",
                       soname, missing);
    }
    *library = lib.handle;
    return 0;
}

/* The one process-wide copy: written once under `once`, read-only after. */
static struct {
    pthread_once_t once;
    struct kube_curl api;
    void *library; /* never dlclose'd: see curl_api.h */
    char error[GP_ERR_LEN];
} libcurl = {.once = PTHREAD_ONCE_INIT};

static void load_libcurl(void)
{
    if (kube_curl_open(KUBE_CURL_SONAME, &libcurl.api, &libcurl.library, libcurl.error,
                       sizeof libcurl.error) != 0)
        libcurl.library = NULL; /* the error stays for every later caller */
}

const struct kube_curl *kube_curl_get(char *err, size_t errlen)
{
    pthread_once(&libcurl.once, load_libcurl);
    if (libcurl.library == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s", libcurl.error);
        return NULL;
    }
    return &libcurl.api;
}

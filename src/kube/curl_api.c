/* curl_api.c -- dlopen loader for libcurl (see curl_api.h). */
#include "curl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

int kube_curl_open(const char *soname, struct kube_curl *api, void **library, char *err,
                   size_t errlen)
{
    memset(api, 0, sizeof *api);
    *library = NULL;
    /* RTLD_LOCAL: curl's symbols (and OpenSSL's) stay out of the global
     * namespace, where they could interpose on another copy a program
     * loads. RTLD_NOW: a broken install fails here, not mid-request. */
    void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(err, errlen, "%s (install libcurl4)", why ? why : soname);
        return -1;
    }
#define KUBE_CURL_BIND(name)                                                                       \
    do {                                                                                           \
        void *fn = dlsym(handle, "curl_" #name);                                                   \
        if (fn == NULL) {                                                                          \
            snprintf(err, errlen,                                                                  \
                     "%s has no curl_" #name ": it is not libcurl, or older than 7.68 "            \
                     "(install libcurl4)",                                                         \
                     soname);                                                                      \
            dlclose(handle);                                                                       \
            memset(api, 0, sizeof *api);                                                           \
            return -1;                                                                             \
        }                                                                                          \
        /* POSIX guarantees that object and function pointers convert. */                         \
        memcpy(&api->name, &fn, sizeof fn);                                                        \
    } while (0);
    KUBE_CURL_FUNCTIONS(KUBE_CURL_BIND)
#undef KUBE_CURL_BIND
    *library = handle;
    return 0;
}

/* The one process-wide copy: written once under `once`, read-only after. */
static struct {
    pthread_once_t once;
    struct kube_curl api;
    void *library; /* never dlclose'd: see curl_api.h */
    char error[512];
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

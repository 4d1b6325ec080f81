/* curl_api.h -- libcurl, resolved at run time (internal to gp_kube).
 *
 * gp_kube does not link libcurl: every program links gp_kube, and libcurl's
 * own dependencies (OpenSSL, GnuTLS, Kerberos, LDAP, libssh2, ... about 30
 * libraries) cost a device plugin that never talks to the API server more
 * than its whole heap (see docs/kube.md). The library is dlopen'ed by the
 * first kube_client_new() (or kube_escape()) and its ~20 functions are
 * called through struct kube_curl. <curl/curl.h> still provides the types,
 * constants and prototypes (each field's type is the prototype's, so a
 * mismatch cannot compile).
 *
 * Lifetime: loaded once per process, never unloaded (libcurl may keep
 * resolver threads and OpenSSL keeps atexit handlers; unloading under them
 * would crash). curl_global_init/cleanup stay the callers' business. */
#ifndef GP_KUBE_CURL_API_H
#define GP_KUBE_CURL_API_H

/* curl's type-checking macros wrap curl_easy_setopt and friends by name;
 * the functions are reached through the table instead. */
#ifndef CURL_DISABLE_TYPECHECK
#define CURL_DISABLE_TYPECHECK
#endif
#include <curl/curl.h>
#include <stddef.h>

#include "compiler.h"

/* The soname of libcurl's ABI 4 (every libcurl since 7.16; Debian: libcurl4). */
#define KUBE_CURL_SONAME "libcurl.so.4"

/* X(name): the field `name` holds curl_<name>. curl_multi_poll (7.66) and
 * curl_multi_wakeup (7.68) are the newest ones used. */
/* clang-format off */
#define KUBE_CURL_FUNCTIONS(X)                                                                     \
    X(global_init)                                                                                 \
    X(global_cleanup)                                                                              \
    X(easy_init)                                                                                   \
    X(easy_cleanup)                                                                                \
    X(easy_reset)                                                                                  \
    X(easy_setopt)                                                                                 \
    X(easy_getinfo)                                                                                \
    X(easy_perform)                                                                                \
    X(easy_strerror)                                                                               \
    X(easy_escape)                                                                                 \
    X(free)                                                                                        \
    X(slist_append)                                                                                \
    X(slist_free_all)                                                                              \
    X(multi_init)                                                                                  \
    X(multi_cleanup)                                                                               \
    X(multi_add_handle)                                                                            \
    X(multi_remove_handle)                                                                         \
    X(multi_perform)                                                                               \
    X(multi_poll)                                                                                  \
    X(multi_wakeup)                                                                                \
    X(multi_info_read)
/* clang-format on */

struct kube_curl {
#define KUBE_CURL_FIELD(name) __typeof__(curl_##name) *name;
    KUBE_CURL_FUNCTIONS(KUBE_CURL_FIELD)
#undef KUBE_CURL_FIELD
};

/* The process-wide table, loading libcurl on the first call (thread-safe).
 * NULL when libcurl or one of its functions is missing: err (may be NULL)
 * then says which, e.g. "libcurl.so.4: cannot open shared object file: No
 * such file or directory (install libcurl4)"; every later call fails the
 * same way. The table is immutable once returned. */
const struct kube_curl *kube_curl_get(char *err, size_t errlen);

/* The loader behind kube_curl_get, for any soname (the unit tests use it to
 * check the messages for a missing library and a library without curl's
 * functions). On success *library is the dlopen handle (the caller's to
 * dlclose, once nothing uses *api). -1 with err set otherwise. */
int kube_curl_open(const char *soname, struct kube_curl *api, void **library, char *err,
                   size_t errlen) GP_MUST_USE;

#endif

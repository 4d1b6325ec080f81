/* httpd.c -- libmicrohttpd glue: our listening socket, body accumulation, size caps, connection
 * limits and deadlines, TLS with client certificates (see httpd.h). */
#include "httpd.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h> /* types and constants only: the functions come from dl_bind */

#include "buf.h"
#include "clock.h"
#include "conn_table.h"
#include "dl.h"
#include "errmsg.h"
#include "log.h"

/* The libmicrohttpd functions we call, bound at run time. */
/* clang-format off */
#define HTTPD_MHD_FUNCTIONS(X)                                                                 \
    X(start_daemon, "MHD_start_daemon", struct MHD_Daemon *,                                   \
      (unsigned int, uint16_t, MHD_AcceptPolicyCallback, void *, MHD_AccessHandlerCallback,    \
       void *, ...))                                                                           \
    X(stop_daemon, "MHD_stop_daemon", void, (struct MHD_Daemon *))                             \
    X(create_response_from_buffer, "MHD_create_response_from_buffer", struct MHD_Response *,   \
      (size_t, void *, enum MHD_ResponseMemoryMode))                                           \
    X(add_response_header, "MHD_add_response_header", enum MHD_Result,                         \
      (struct MHD_Response *, const char *, const char *))                                     \
    X(queue_response, "MHD_queue_response", enum MHD_Result,                                   \
      (struct MHD_Connection *, unsigned int, struct MHD_Response *))                          \
    X(destroy_response, "MHD_destroy_response", void, (struct MHD_Response *))                 \
    X(lookup_connection_value, "MHD_lookup_connection_value", const char *,                    \
      (struct MHD_Connection *, enum MHD_ValueKind, const char *))                             \
    X(is_feature_supported, "MHD_is_feature_supported", enum MHD_Result, (enum MHD_FEATURE))     \
    X(get_connection_info, "MHD_get_connection_info", const union MHD_ConnectionInfo *,         \
      (struct MHD_Connection *, enum MHD_ConnectionInfoType, ...))
/* clang-format on */

struct mhd_api {
#define HTTPD_MHD_FIELD(field, name, ret, args) ret(*field) args;
    HTTPD_MHD_FUNCTIONS(HTTPD_MHD_FIELD)
#undef HTTPD_MHD_FIELD
};

/* GnuTLS, for client certificates only: libmicrohttpd hands us its
 * session and leaves the verification to us. Already loaded as a
 * dependency of libmicrohttpd; bound by name so that no GnuTLS header or
 * link is needed. */
#define HTTPD_GNUTLS_SONAME "libgnutls.so.30"
#define HTTPD_GNUTLS_NO_CERTIFICATE_FOUND (-49) /* GNUTLS_E_NO_CERTIFICATE_FOUND */
/* gnutls_typed_vdata_st: what a certificate is verified for. */
struct httpd_gnutls_vdata {
    int type; /* gnutls_vdata_types_t */
    unsigned char *data;
    unsigned int size;
};
#define HTTPD_GNUTLS_DT_KEY_PURPOSE_OID 2                  /* GNUTLS_DT_KEY_PURPOSE_OID */
#define HTTPD_GNUTLS_KP_TLS_WWW_CLIENT "1.3.6.1.5.5.7.3.2" /* id-kp-clientAuth */
/* gnutls_certificate_status_t bits, for the log's reason. */
#define HTTPD_GNUTLS_CERT_SIGNER_NOT_FOUND (1u << 6)
#define HTTPD_GNUTLS_CERT_NOT_ACTIVATED (1u << 9)
#define HTTPD_GNUTLS_CERT_EXPIRED (1u << 10)
#define HTTPD_GNUTLS_CERT_PURPOSE_MISMATCH (1u << 18)
/* gnutls_certificate_verify_peers */
typedef int (*gnutls_verify_fn)(void *session, struct httpd_gnutls_vdata *data,
                                unsigned int elements, unsigned int *status);

struct httpd {
    struct dl_library lib;
    struct mhd_api mhd;
    struct MHD_Daemon *daemon;
    httpd_handler_fn handler;
    void *ctx;
    size_t max_body;
    size_t max_body_total;
    atomic_size_t body_total; /* bytes buffered by every request now */
    unsigned port;
    char bound[128];
    const char *what;
    /* client certificates */
    bool verify_clients;
    const char *const *open_paths;
    struct dl_library gnutls;
    gnutls_verify_fn verify_peers;
    /* open connections (conn_table.h), under conns_lock; the request
     * deadline: a reaper thread shuts the late ones down once a second */
    struct conn_table conns;
    bool conns_ready;
    unsigned evicted, refused; /* since the reaper last logged them */
    int64_t deadline_ns;
    pthread_mutex_t conns_lock;
    pthread_cond_t reaper_wake;
    bool reaper_started, stopping;
    pthread_t reaper;
};

/* One request in progress (MHD's per-connection "con_cls"). */
struct request {
    struct buf body; /* first_cap 16 KiB: most bodies fit in one allocation */
    size_t reserved; /* bytes counted in body_total */
    int refused;     /* 0, or the status already decided: 413, 503 */
};

static const char too_large_body[] = "{\"Error\":\"request body too large\"}";
static const char busy_body[] =
    "{\"Error\":\"server busy: too many request bodies in flight, retry\"}";
static const char forbidden_body[] =
    "{\"Error\":\"a client certificate signed by the configured CA is required\"}";

static void log_mhd(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n')
        line[n - 1] = '\0';
    log_warn("libmicrohttpd: %s", line);
}

static struct conn_entry *entry_of(struct httpd *server, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        server->mhd.get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/* busy: the request has arrived (or, false, its reply is out and the
 * connection waits for the next one, which restarts the deadline). */
static void entry_set_busy(struct httpd *server, struct MHD_Connection *conn, bool busy)
{
    struct conn_entry *e = entry_of(server, conn);
    if (!e)
        return;
    pthread_mutex_lock(&server->conns_lock);
    conn_table_set_busy(e, busy, clock_now_ns());
    pthread_mutex_unlock(&server->conns_lock);
}

static void request_release(struct httpd *server, struct request *req)
{
    if (req->reserved)
        atomic_fetch_sub(&server->body_total, req->reserved);
    req->reserved = 0;
    buf_free(&req->body);
}

static void request_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    (void)code;
    struct httpd *server = cls;
    struct request *req = *con_cls;
    if (req) {
        request_release(server, req);
        free(req);
        *con_cls = NULL;
    }
    entry_set_busy(server, conn, false);
}

/* MHD's accept policy: runs on MHD's accepting thread for each new
 * connection, right before the MHD_CONNECTION_NOTIFY_STARTED that adds it
 * to the table on the same thread, so the count it sees is exact. A full
 * table sheds an idle connection of a heavier address (conn_table.h)
 * rather than refuse the newcomer. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    struct httpd *server = cls;
    pthread_mutex_lock(&server->conns_lock);
    enum conn_admission a = conn_table_make_room(&server->conns, addr);
    if (a == CONN_EVICTED)
        server->evicted++;
    else if (a == CONN_REFUSED)
        server->refused++;
    pthread_mutex_unlock(&server->conns_lock);
    return a == CONN_REFUSED ? MHD_NO : MHD_YES;
}

/* MHD_CONNECTION_NOTIFY_CLOSED comes before MHD closes the socket, and
 * sockets are shut down only under conns_lock, so no descriptor number
 * that was closed and reused is ever touched. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct httpd *server = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd =
            server->mhd.get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *addr =
            server->mhd.get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!fd)
            return; /* not tracked: only MHD's limits and idle timeout apply to it */
        pthread_mutex_lock(&server->conns_lock);
        *socket_context = conn_table_add(&server->conns, fd->connect_fd,
                                         addr ? addr->client_addr : NULL, clock_now_ns());
        pthread_mutex_unlock(&server->conns_lock);
        return;
    }
    struct conn_entry *e = *socket_context;
    if (!e)
        return;
    pthread_mutex_lock(&server->conns_lock);
    conn_table_remove(&server->conns, e);
    pthread_mutex_unlock(&server->conns_lock);
    *socket_context = NULL;
}

/* Once a second: shuts down (never closes: MHD owns the descriptor) every
 * connection whose request has not arrived within the deadline, MHD then
 * sees the end of the stream and closes it; and logs what the accept
 * policy did meanwhile (once a second, not once per connection: a flood
 * would flood the log too). */
static void *reaper_main(void *arg)
{
    struct httpd *server = arg;
    pthread_mutex_lock(&server->conns_lock);
    while (!server->stopping) {
        struct timespec wake = clock_deadline(CLOCK_MONOTONIC, 1000);
        (void)pthread_cond_timedwait(&server->reaper_wake, &server->conns_lock, &wake);
        unsigned late = 0;
        if (server->deadline_ns)
            late = conn_table_shut_expired(&server->conns, clock_now_ns(), server->deadline_ns);
        if (late)
            log_v(1, "%s %s: closed %u connection(s) that sent no complete request within %lld s",
                  server->what, server->bound, late, (long long)(server->deadline_ns / 1000000000));
        if (server->evicted || server->refused)
            log_v(1,
                  "%s %s: at its %u connections: closed %u idle one(s) to admit new ones, "
                  "refused %u (every open one busy, or their address held enough)",
                  server->what, server->bound, server->conns.capacity, server->evicted,
                  server->refused);
        server->evicted = server->refused = 0;
    }
    pthread_mutex_unlock(&server->conns_lock);
    return NULL;
}

static enum MHD_Result send_reply(struct httpd *server, struct MHD_Connection *conn, int status,
                                  const char *type, char *body, size_t len, bool must_free)
{
    struct MHD_Response *resp = server->mhd.create_response_from_buffer(
        len, body ? body : (char *)"",
        must_free && body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        if (must_free)
            free(body);
        return MHD_NO;
    }
    if (type)
        server->mhd.add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result r = server->mhd.queue_response(conn, (unsigned)status, resp);
    server->mhd.destroy_response(resp);
    return r;
}

static enum MHD_Result send_refusal(struct httpd *server, struct MHD_Connection *conn, int status)
{
    const char *body = status == MHD_HTTP_CONTENT_TOO_LARGE ? too_large_body
                       : status == MHD_HTTP_FORBIDDEN       ? forbidden_body
                                                            : busy_body;
    return send_reply(server, conn, status, "application/json", (char *)body, strlen(body), false);
}

/* Appends a chunk of the body, or notes the refusal (the rest is then
 * read and dropped, so the connection stays usable for the answer): 413
 * past max_body or out of memory, 503 past max_body_total. */
static void request_append(struct httpd *server, struct request *req, const char *data, size_t n)
{
    if (req->refused)
        return;
    if (n > server->max_body - req->body.len) {
        req->refused = MHD_HTTP_CONTENT_TOO_LARGE;
    } else if (server->max_body_total &&
               atomic_fetch_add(&server->body_total, n) + n > server->max_body_total) {
        atomic_fetch_sub(&server->body_total, n);
        req->refused = MHD_HTTP_SERVICE_UNAVAILABLE;
    } else {
        if (server->max_body_total)
            req->reserved += n;
        if (!buf_add(&req->body, data, n))
            req->refused = MHD_HTTP_CONTENT_TOO_LARGE;
    }
    if (req->refused)
        request_release(server, req);
}

static bool open_path(const struct httpd *server, const char *url)
{
    for (const char *const *p = server->open_paths; p && *p; p++)
        if (strcmp(*p, url) == 0)
            return true;
    return false;
}

/* Why a client certificate was refused, for the log. */
static const char *refusal_reason(int rc, unsigned int status)
{
    if (rc == HTTPD_GNUTLS_NO_CERTIFICATE_FOUND)
        return "none sent";
    if (rc != 0)
        return "verification error";
    if (status & HTTPD_GNUTLS_CERT_SIGNER_NOT_FOUND)
        return "not signed by the client CA";
    if (status & (HTTPD_GNUTLS_CERT_EXPIRED | HTTPD_GNUTLS_CERT_NOT_ACTIVATED))
        return "expired or not yet valid";
    if (status & HTTPD_GNUTLS_CERT_PURPOSE_MISMATCH)
        return "not for client authentication: its extendedKeyUsage lacks clientAuth";
    return "does not verify against the client CA";
}

/* Whether the TLS client presented a certificate that verifies against
 * the client CA (MHD_OPTION_HTTPS_MEM_TRUST made GnuTLS ask for one) for
 * client authentication: a certificate with an extendedKeyUsage must list
 * id-kp-clientAuth, so that a server certificate of the same CA (the
 * extender's own, say) is not a client certificate. One without the
 * extension is valid for every purpose (RFC 5280 4.2.1.12) and passes. */
static bool client_verified(struct httpd *server, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        server->mhd.get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!info || !info->tls_session)
        return false;
    struct httpd_gnutls_vdata purpose = {HTTPD_GNUTLS_DT_KEY_PURPOSE_OID,
                                         (unsigned char *)HTTPD_GNUTLS_KP_TLS_WWW_CLIENT, 0};
    unsigned int status = 1;
    int rc = server->verify_peers(info->tls_session, &purpose, 1, &status);
    if (rc != 0 || status != 0) {
        log_v(1, "%s %s: client certificate refused (%s)", server->what, server->bound,
              refusal_reason(rc, status));
        return false;
    }
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct httpd *server = cls;
    struct request *req = *con_cls;
    if (!req) {
        /* First call: headers only. An announced oversized body is refused
         * before a byte of it is read. */
        if (server->verify_clients && !open_path(server, url) && !client_verified(server, conn))
            return send_refusal(server, conn, MHD_HTTP_FORBIDDEN);
        const char *length = server->mhd.lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (server->max_body && length && strtoull(length, NULL, 10) > server->max_body)
            return send_refusal(server, conn, MHD_HTTP_CONTENT_TOO_LARGE);
        if (!(req = calloc(1, sizeof(*req))))
            return MHD_NO;
        req->body.first_cap = 16384;
        *con_cls = req;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (server->max_body) /* 0: dropped; the reply goes out at the body's end */
            request_append(server, req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    entry_set_busy(server, conn, true); /* the whole request is in */
    if (req->refused)
        return send_refusal(server, conn, req->refused);
    const struct httpd_request request = {
        method, url, req->body.data ? req->body.data : "", req->body.len, server, conn};
    struct httpd_response resp = {.status = 500, .content_type = "application/json"};
    server->handler(server->ctx, &request, &resp);
    return send_reply(server, conn, resp.status, resp.content_type, resp.body, resp.len,
                      !resp.body_static);
}

const char *httpd_header(const struct httpd_request *req, const char *name)
{
    if (req->server == NULL || req->conn == NULL)
        return NULL;
    return req->server->mhd.lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *httpd_query(const struct httpd_request *req, const char *key)
{
    return req->server->mhd.lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

static int load_mhd(struct httpd *server, char *err, size_t errlen)
{
    static const char *const soname[] = {HTTPD_SONAME};
    char why[GP_ERR_LEN];
    if (dl_open(&server->lib, soname, 1, RTLD_NOW | RTLD_LOCAL, why, sizeof why) != 0)
        return gp_errf(err, errlen, "cannot load %s (Debian package libmicrohttpd12): %s",
                       HTTPD_SONAME, server->lib.error);
#define HTTPD_MHD_NAMES(field, name, ret, args) \
    static const char *const field##_names[] = {name, NULL};
    HTTPD_MHD_FUNCTIONS(HTTPD_MHD_NAMES)
#undef HTTPD_MHD_NAMES
#define HTTPD_MHD_ENTRY(field, name, ret, args) {field##_names, &server->mhd.field, NULL, true},
    const struct dl_symbol table[] = {HTTPD_MHD_FUNCTIONS(HTTPD_MHD_ENTRY)};
#undef HTTPD_MHD_ENTRY
    if (dl_bind(&server->lib, table, sizeof table / sizeof table[0], NULL, why, sizeof why) != 0)
        return gp_errf(err, errlen, "%s lacks a function gpupool needs (%s)", HTTPD_SONAME, why);
    return 0;
}

/* "H:P", "[v6]:P" or ":P": how errors and the logs name an address. */
static void format_address(char *out, size_t outlen, const char *host, unsigned port)
{
    if (strchr(host, ':') && host[0] != '[')
        snprintf(out, outlen, "[%s]:%u", host, port);
    else
        snprintf(out, outlen, "%s:%u", host, port);
}

/* host without the brackets of "[::1]" into out. */
static void unbracket(const char *host, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s", host ? host : "");
    size_t n = strlen(out);
    if (n >= 2 && out[0] == '[' && out[n - 1] == ']') {
        memmove(out, out + 1, n - 2);
        out[n - 2] = '\0';
    }
}

bool httpd_host_is_numeric(const char *host)
{
    char bare[INET6_ADDRSTRLEN + 2];
    unsigned char raw[sizeof(struct in6_addr)];
    unbracket(host, bare, sizeof bare);
    return inet_pton(AF_INET, bare, raw) == 1 || inet_pton(AF_INET6, bare, raw) == 1;
}

/* Our own socket: a clear error for a bad host or a port in use, and the
 * bound address when port 0 was asked for. Returns the fd or -1. */
static int listen_on(const struct httpd_options *opt, char *bound, size_t boundlen, unsigned *port,
                     int *family, char *err, size_t errlen)
{
    const char *what = opt->what ? opt->what : "address";
    char host[256], port_text[8], shown[300];
    unbracket(opt->host, host, sizeof host);
    format_address(shown, sizeof shown, host, opt->port);
    snprintf(port_text, sizeof port_text, "%u", opt->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host[0] ? host : "0.0.0.0", port_text, &hints, &res);
    if (rc != 0)
        return gp_errf(err, errlen, "invalid %s \"%s\": %s", what, shown, gai_strerror(rc));
    int fd = -1;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* best effort */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
            listen(fd, opt->listen_backlog ? (int)opt->listen_backlog : SOMAXCONN) != 0) {
            snprintf(err, errlen, "cannot listen on %s %s: %s", what, shown, strerror(errno));
            close(fd);
            fd = -1;
            continue;
        }
        *family = ai->ai_family;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        snprintf(err, errlen, "cannot listen on %s %s: %s", what, shown, strerror(errno));
        close(fd);
        return -1;
    }
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        *port = ntohs(s6->sin6_port);
        snprintf(bound, boundlen, "[%s]:%u", ip, *port);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        *port = ntohs(s4->sin_port);
        snprintf(bound, boundlen, "%s:%u", ip, *port);
    }
    return fd;
}

int httpd_start(const struct httpd_options *opt, httpd_handler_fn handler, void *ctx,
                struct httpd **out, char *err, size_t errlen)
{
    *out = NULL;
    struct httpd *server = calloc(1, sizeof(*server));
    if (!server)
        return gp_errf(err, errlen, "out of memory");
    server->handler = handler;
    server->ctx = ctx;
    server->max_body = opt->max_body;
    server->max_body_total = opt->max_body_total;
    server->what = opt->what ? opt->what : "address";
    server->open_paths = opt->open_paths;
    server->deadline_ns = (int64_t)opt->request_deadline_s * 1000000000;
    pthread_mutex_init(&server->conns_lock, NULL);
    clock_cond_init(&server->reaper_wake);
    unsigned capacity = opt->max_connections ? opt->max_connections : 256;
    if (conn_table_init(&server->conns, capacity) != 0) {
        httpd_stop(server);
        return gp_errf(err, errlen, "out of memory");
    }
    server->conns_ready = true;
    int family = AF_INET;
    int fd =
        listen_on(opt, server->bound, sizeof server->bound, &server->port, &family, err, errlen);
    if (fd < 0 || load_mhd(server, err, errlen) != 0) {
        if (fd >= 0)
            close(fd);
        httpd_stop(server);
        return -1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    /* poll(), not select(), in both models: select() refuses descriptors
     * from FD_SETSIZE (1024) on, which a server with 1,024 connections and
     * its other files reaches. */
    flags |= MHD_USE_POLL;
    if (opt->thread_per_connection)
        flags |= MHD_USE_THREAD_PER_CONNECTION;
    if (family == AF_INET6)
        flags |= MHD_USE_IPv6;
    bool tls = opt->tls_cert_pem && opt->tls_key_pem;
    if (tls) {
        if (server->mhd.is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            snprintf(err, errlen, "this libmicrohttpd was built without TLS support");
            close(fd);
            httpd_stop(server);
            return -1;
        }
        flags |= MHD_USE_TLS;
    }
    if (opt->tls_client_ca_pem && !tls) {
        snprintf(err, errlen, "client certificates need TLS (a certificate and key)");
        close(fd);
        httpd_stop(server);
        return -1;
    }
    if (opt->tls_client_ca_pem) {
        static const char *const gnutls_soname[] = {HTTPD_GNUTLS_SONAME};
        static const char *const verify_names[] = {"gnutls_certificate_verify_peers", NULL};
        const struct dl_symbol verify[] = {{verify_names, &server->verify_peers, NULL, true}};
        char why[GP_ERR_LEN];
        if (dl_open(&server->gnutls, gnutls_soname, 1, RTLD_NOW | RTLD_LOCAL, why, sizeof why) !=
                0 ||
            dl_bind(&server->gnutls, verify, 1, NULL, why, sizeof why) != 0) {
            snprintf(err, errlen, "client certificates need GnuTLS: %s", why);
            close(fd);
            httpd_stop(server);
            return -1;
        }
        server->verify_clients = true;
    }
    int rc = pthread_create(&server->reaper, NULL, reaper_main, server);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start a thread: %s", strerror(rc));
        close(fd);
        httpd_stop(server);
        return -1;
    }
    server->reaper_started = true;
    /* MHD's own limit is the table's plus a reserve: a connection shed by
     * on_accept counts no more but stays open until its thread (or the
     * polling thread) sees the end of the stream, and a full MHD stops
     * accepting, so without room for those a newcomer would wait. */
    unsigned reserve = capacity / 8 + 4;
    struct MHD_OptionItem ops[] = {
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)request_done, server},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, server},
        {MHD_OPTION_LISTEN_SOCKET, fd, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, capacity + reserve, NULL},
        {opt->per_ip_limit ? MHD_OPTION_PER_IP_CONNECTION_LIMIT : MHD_OPTION_END, opt->per_ip_limit,
         NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, opt->idle_timeout_s ? opt->idle_timeout_s : 300, NULL},
        /* Read buffer per connection: a 5,000-name filter body (~85 KB)
         * arrives in a few reads instead of a dozen. */
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, 128 * 1024, NULL},
        {opt->thread_stack_bytes ? MHD_OPTION_THREAD_STACK_SIZE : MHD_OPTION_END,
         (intptr_t)opt->thread_stack_bytes, NULL},
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)opt->tls_cert_pem},
        {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, (void *)opt->tls_key_pem},
        /* Makes GnuTLS ask every client for a certificate; client_verified()
         * decides per request (MHD itself accepts a connection without one). */
        {opt->tls_client_ca_pem ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0,
         (void *)opt->tls_client_ca_pem},
        {MHD_OPTION_END, 0, NULL},
    };
    /* MHD_OPTION_END ends the array early, so unused entries go last. */
    struct MHD_OptionItem used[sizeof(ops) / sizeof(ops[0])];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        if (ops[i].option != MHD_OPTION_END)
            used[n++] = ops[i];
    used[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    server->daemon =
        server->mhd.start_daemon(flags, 0, on_accept, server, on_request, server,
                                 MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL, /* first: see MHD */
                                 MHD_OPTION_ARRAY, used, MHD_OPTION_END);
    if (!server->daemon) {
        snprintf(err, errlen,
                 "cannot serve HTTP%s on %s (bad TLS certificate/key, or out of resources; "
                 "libmicrohttpd logged the cause above)",
                 tls ? "S" : "", server->bound);
        close(fd);
        httpd_stop(server);
        return -1;
    }
    *out = server;
    return 0;
}

unsigned httpd_port(const struct httpd *server)
{
    return server->port;
}

const char *httpd_bound_address(const struct httpd *server)
{
    return server->bound;
}

void httpd_stop(struct httpd *server)
{
    if (!server)
        return;
    if (server->reaper_started) {
        pthread_mutex_lock(&server->conns_lock);
        server->stopping = true;
        pthread_cond_signal(&server->reaper_wake);
        pthread_mutex_unlock(&server->conns_lock);
        pthread_join(server->reaper, NULL);
    }
    if (server->daemon)
        server->mhd.stop_daemon(server->daemon); /* joins its threads, closes the listen socket */
    if (server->conns_ready)
        conn_table_destroy(&server->conns); /* empty by now: MHD closed every connection */
    char why[GP_ERR_LEN];
    if (dl_close(&server->gnutls, why, sizeof why) != 0)
        log_warn("httpd: %s", why);
    if (dl_close(&server->lib, why, sizeof why) != 0)
        log_warn("httpd: %s", why);
    pthread_cond_destroy(&server->reaper_wake);
    pthread_mutex_destroy(&server->conns_lock);
    free(server);
}

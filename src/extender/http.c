/* http.c -- libmicrohttpd glue: body accumulation, size cap, TLS (see http.h). */
#include "http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct http_server {
    struct MHD_Daemon *daemon;
    http_handler_fn handler;
    void *ctx;
    size_t max_body;
    int port;
};

/* One request in progress (MHD's per-connection "con_cls"). */
struct request {
    char *body;
    size_t len, cap;
    bool too_large;
};

static const char too_large_body[] = "{\"Error\":\"request body too large\"}";

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

static void request_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    (void)cls;
    (void)conn;
    (void)code;
    struct request *req = *con_cls;
    if (req) {
        free(req->body);
        free(req);
        *con_cls = NULL;
    }
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, int status, const char *type,
                                  char *body, size_t len, bool must_free)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body ? body : (char *)"", must_free && body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        if (must_free)
            free(body);
        return MHD_NO;
    }
    if (type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result send_too_large(struct MHD_Connection *conn)
{
    return send_reply(conn, MHD_HTTP_CONTENT_TOO_LARGE, "application/json", (char *)too_large_body,
                      sizeof(too_large_body) - 1, false);
}

/* Appends a chunk of the body, or notes that the cap was passed (the rest
 * is then read and dropped, so the connection stays usable for the 413). */
static void request_append(struct request *req, size_t max, const char *data, size_t n)
{
    if (req->too_large)
        return;
    if (n > max - req->len) {
        req->too_large = true;
        free(req->body);
        req->body = NULL;
        req->len = req->cap = 0;
        return;
    }
    if (req->len + n + 1 > req->cap) {
        size_t cap = req->cap ? req->cap : 16384;
        while (cap < req->len + n + 1)
            cap *= 2;
        char *body = realloc(req->body, cap);
        if (!body) {
            req->too_large = true; /* out of memory: refuse like an oversized body */
            return;
        }
        req->body = body;
        req->cap = cap;
    }
    memcpy(req->body + req->len, data, n);
    req->len += n;
    req->body[req->len] = '\0';
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct http_server *server = cls;
    struct request *req = *con_cls;
    if (!req) {
        /* First call: headers only. An announced oversized body is refused
         * before a byte of it is read. */
        const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (length && strtoull(length, NULL, 10) > server->max_body)
            return send_too_large(conn);
        if (!(req = calloc(1, sizeof(*req))))
            return MHD_NO;
        *con_cls = req;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        request_append(req, server->max_body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->too_large)
        return send_too_large(conn);
    struct http_response resp = {.status = 500, .content_type = "application/json"};
    server->handler(server->ctx, method, url, req->body ? req->body : "", req->len, &resp);
    return send_reply(conn, resp.status, resp.content_type, resp.body, resp.len, true);
}

/* Fills addr from a numeric address; -1 when it is not one. */
static int parse_address(const char *address, int port, struct sockaddr_storage *addr, bool *ipv6)
{
    memset(addr, 0, sizeof(*addr));
    struct sockaddr_in *v4 = (struct sockaddr_in *)addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)addr;
    char host[INET6_ADDRSTRLEN + 2];
    snprintf(host, sizeof(host), "%s", address);
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') { /* "[::1]" */
        memmove(host, host + 1, n - 2);
        host[n - 2] = '\0';
    }
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *ipv6 = false;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *ipv6 = true;
        return 0;
    }
    return -1;
}

struct http_server *http_server_start(const struct http_options *opt, http_handler_fn handler,
                                      void *ctx, char *err, size_t errlen)
{
    struct http_server *server = calloc(1, sizeof(*server));
    if (!server) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    server->handler = handler;
    server->ctx = ctx;
    server->max_body = opt->max_body;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ERROR_LOG;
    struct sockaddr_storage addr;
    bool ipv6 = false, have_addr = opt->address && *opt->address;
    if (have_addr && parse_address(opt->address, opt->port, &addr, &ipv6) < 0) {
        snprintf(err, errlen, "--address %s is not a numeric IPv4 or IPv6 address", opt->address);
        free(server);
        return NULL;
    }
    if (ipv6)
        flags |= MHD_USE_IPv6;
    bool tls = opt->tls_cert_pem && opt->tls_key_pem;
    if (tls) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            snprintf(err, errlen, "this libmicrohttpd was built without TLS support");
            free(server);
            return NULL;
        }
        flags |= MHD_USE_TLS;
    }
    struct MHD_OptionItem ops[] = {
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)request_done, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, opt->max_connections ? opt->max_connections : 256, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, opt->idle_timeout_s ? opt->idle_timeout_s : 300, NULL},
        /* Read buffer per connection: a 5,000-name filter body (~85 KB)
         * arrives in a few reads instead of a dozen. */
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, 128 * 1024, NULL},
        {have_addr ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_END, 0, have_addr ? &addr : NULL},
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)opt->tls_cert_pem},
        {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, (void *)opt->tls_key_pem},
        {MHD_OPTION_END, 0, NULL},
    };
    /* MHD_OPTION_END ends the array early, so unused entries go last. */
    struct MHD_OptionItem used[sizeof(ops) / sizeof(ops[0])];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        if (ops[i].option != MHD_OPTION_END)
            used[n++] = ops[i];
    used[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    server->daemon = MHD_start_daemon(flags, (uint16_t)opt->port, NULL, NULL, on_request, server,
                                      MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL, /* first: see MHD */
                                      MHD_OPTION_ARRAY, used, MHD_OPTION_END);
    if (!server->daemon) {
        snprintf(err, errlen,
                 "cannot serve HTTP%s on %s:%d (port in use, address not local, or bad TLS "
                 "certificate/key; libmicrohttpd logged the cause above)",
                 tls ? "S" : "", have_addr ? opt->address : "*", opt->port);
        free(server);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(server->daemon, MHD_DAEMON_INFO_BIND_PORT);
    server->port = info ? info->port : opt->port;
    return server;
}

int http_server_port(const struct http_server *server)
{
    return server->port;
}

void http_server_stop(struct http_server *server)
{
    if (!server)
        return;
    MHD_stop_daemon(server->daemon);
    free(server);
}

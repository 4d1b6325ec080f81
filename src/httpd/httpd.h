/* httpd.h -- the HTTP(S) server both daemons use, on libmicrohttpd loaded at run time.
 *
 * Knows nothing of its callers: it listens on HOST:PORT, accumulates each
 * request body (up to max_body bytes; beyond that it answers 413 itself
 * without reading on), hands method, path, query and body to one handler
 * and sends what the handler filled in. libmicrohttpd is dlopen'ed by
 * httpd_start() (base/dl.h), never NEEDED: a program that serves nothing
 * never loads it, and a missing library is an error message, not a program
 * that does not start. Users: the extender (API and /metrics ports) and the
 * device plugin's --metrics-addr.
 *
 * Threads: thread_per_connection = one thread per connection (a handler may
 * block, e.g. a bind waiting for the API server, without stalling other
 * connections; kube-scheduler keeps a few persistent connections open);
 * otherwise one internal polling thread serves every connection in turn.
 * Handlers run on those threads, concurrently in the first model.
 * Errors: httpd_start() returns -1 with a message (bad address, port in use,
 * library missing, TLS key/cert refused or not built in).
 * Ownership: the caller owns the struct httpd returned and stops it. */
#ifndef GP_HTTPD_H
#define GP_HTTPD_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler.h"

#define HTTPD_SONAME "libmicrohttpd.so.12"

struct httpd;

/* One request, valid during the handler call only. */
struct httpd_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* without the query string */
    const char *body;   /* NUL-terminated; "" when none (or max_body is 0) */
    size_t len;
    struct httpd *server; /* for httpd_query() */
    void *conn;
};

/* The value of query parameter key ("?node=a" -> "a"), or NULL. */
const char *httpd_query(const struct httpd_request *req, const char *key);
/* The value of request header name (case-insensitive), or NULL; NULL for
 * a request not made by the server (tests call handlers directly). */
const char *httpd_header(const struct httpd_request *req, const char *name);

/* What a handler answers (status preset to 500, content_type to
 * application/json). body: malloc'ed and taken by the server once the
 * handler returns, or, with body_static, a string that outlives the
 * server (sent as is, never freed). NULL = empty body. */
struct httpd_response {
    int status;
    const char *content_type; /* static string */
    char *body;
    size_t len;
    bool body_static;
};

typedef void (*httpd_handler_fn)(void *ctx, const struct httpd_request *req,
                                 struct httpd_response *resp);

struct httpd_options {
    const char *host; /* IPv4/IPv6 address or name, "[::1]" too; NULL or "" = every IPv4 address */
    unsigned port;    /* 0 = an ephemeral port (see httpd_port) */
    const char *what; /* names the listener in errors: "metrics address" */
    const char *tls_cert_pem; /* both set: HTTPS */
    const char *tls_key_pem;
    size_t max_body; /* bytes; larger bodies get 413. 0 = bodies are read and dropped */
    bool thread_per_connection;
    unsigned max_connections;  /* 0 = 256 */
    unsigned idle_timeout_s;   /* 0 = 300 */
    unsigned listen_backlog;   /* 0 = SOMAXCONN */
    size_t thread_stack_bytes; /* 0 = the default */
};

/* Whether host is a numeric IPv4 or IPv6 address ("[::1]" too), for a
 * caller that takes no names (nothing is resolved at start-up). */
bool httpd_host_is_numeric(const char *host);

/* Binds opt->host:opt->port, loads libmicrohttpd and starts serving.
 * -1 + err: "invalid <what> \"H:P\": <resolver error>", "cannot listen on
 * <what> H:P: <errno text>", the library's absence, TLS refused. */
GP_MUST_USE int httpd_start(const struct httpd_options *opt, httpd_handler_fn handler, void *ctx,
                            struct httpd **out, char *err, size_t errlen);
/* The bound port (port 0 resolved). */
unsigned httpd_port(const struct httpd *server);
/* "127.0.0.1:39211", "[::1]:9400": the address actually bound. */
const char *httpd_bound_address(const struct httpd *server);
/* Closes the listening socket and every connection, waits for handlers in
 * progress, unloads the library, frees. NULL is fine. */
void httpd_stop(struct httpd *server);

#endif

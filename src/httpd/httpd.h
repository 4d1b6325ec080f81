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
 * Limits (docs/security.md): max_connections in all, per_ip_limit from one
 * client address (MHD refuses more at accept), idle_timeout_s without a
 * byte, and request_deadline_s for a whole request to arrive. A full table
 * does not refuse a newcomer while some connection is idle (between
 * requests, or still sending one): it shuts down the idle connection of
 * the client address holding the most, the one waiting longest, and admits
 * the newcomer, if the newcomer's address holds none yet or at least two
 * fewer; otherwise, or when every connection is busy being answered, the
 * newcomer is refused (conn_table.h). So clients that hold or trickle
 * connections from a few addresses cannot keep a probe or a scheduler out.
 * Shed connections stay open until their thread sees the end of the
 * stream, so up to max_connections / 8 + 4 more descriptors may be open
 * for a moment. request_deadline_s: a connection that has not delivered
 * its request line, headers and body that long after it was accepted or
 * after its previous reply is shut down (slow clients that trickle a byte
 * now and then reset an idle timeout, never this one). Time in the handler and sending the reply does not count.
 * max_body_total bounds the bodies buffered by every connection together
 * (503 beyond), so many concurrent bodies under max_body cannot add up.
 * Client certificates: with tls_client_ca_pem, every TLS client is asked
 * for a certificate and a request whose certificate does not verify
 * against that CA for client authentication (or that sends none) gets 403
 * before its body is read, except on the paths of open_paths (a liveness
 * probe has no certificate). A certificate with an extendedKeyUsage must
 * list clientAuth: a server certificate of the same CA is refused.
 * Errors: httpd_start() returns -1 with a message (bad address, port in use,
 * library missing, TLS key/cert refused or not built in, GnuTLS missing for
 * client certificates).
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
    const char *tls_client_ca_pem; /* with TLS: require client certificates signed by it */
    const char *const *open_paths; /* NULL-terminated: served without one; NULL = none */
    size_t max_body;       /* bytes; larger bodies get 413. 0 = bodies are read and dropped */
    size_t max_body_total; /* bytes buffered by all requests at once; 0 = no bound */
    bool thread_per_connection;
    unsigned max_connections;    /* 0 = 256 */
    unsigned per_ip_limit;       /* connections from one address; 0 = no limit */
    unsigned idle_timeout_s;     /* 0 = 300 */
    unsigned request_deadline_s; /* 0 = none (see above) */
    unsigned listen_backlog;     /* 0 = SOMAXCONN */
    size_t thread_stack_bytes;   /* 0 = the default */
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

/* http.h -- a small HTTP(S) server on libmicrohttpd.
 *
 * Knows nothing of the extender: it accumulates each request body (up to
 * max_body bytes; beyond that it answers 413 itself without reading on),
 * hands method, path and body to one handler function, and sends what the
 * handler filled in. One thread per connection (MHD's model): a handler may
 * block (a bind waits for the API server) without stalling other
 * connections; kube-scheduler keeps a few persistent connections open.
 *
 * Errors: http_server_start() returns NULL with a message (port in use,
 * bad address, TLS key/cert refused, TLS not built into libmicrohttpd). */
#ifndef GP_EXTENDER_HTTP_H
#define GP_EXTENDER_HTTP_H

#include <stddef.h>

#include "compiler.h"

struct http_server;

/* What a handler answers. body is malloc'ed (or NULL for none) and owned
 * by the server once the handler returns. */
struct http_response {
    int status;
    const char *content_type;  /* static string */
    char *body;
    size_t len;
};

typedef void (*http_handler_fn)(void *ctx, const char *method, const char *path,
                                const char *body, size_t len, struct http_response *resp);

struct http_options {
    const char *address;       /* numeric IPv4/IPv6 address; NULL or "" = every IPv4 address */
    int port;                  /* 0 = an ephemeral port (see http_server_port) */
    const char *tls_cert_pem;  /* both set: HTTPS */
    const char *tls_key_pem;
    size_t max_body;           /* bytes; larger bodies get 413 */
    unsigned max_connections;  /* 0 = 256 */
    unsigned idle_timeout_s;   /* 0 = 300 */
};

struct http_server *http_server_start(const struct http_options *opt, http_handler_fn handler,
                                      void *ctx, char *err, size_t errlen)
    GP_MUST_USE;
/* The bound port (useful with port 0). */
int http_server_port(const struct http_server *server);
/* Closes the listening socket and every connection, waits for handlers in
 * progress, frees the server. NULL is fine. */
void http_server_stop(struct http_server *server);

#endif

/* wire.h -- pure helpers of the Kubernetes client: no I/O, no libcurl.
 *
 * Internal to gp_kube (and its unit tests): turning a response into a
 * struct kube_error, splitting a watch stream into lines, decoding base64
 * kubeconfig data, and the retry policy arithmetic. Kept apart so each can
 * be tested with exact inputs. */
#ifndef GP_KUBE_WIRE_H
#define GP_KUBE_WIRE_H

#include "kube.h"

#include <stdbool.h>
#include <stddef.h>

/* Fills err from a non-2xx response. When body is a Kubernetes Status
 * ({"kind":"Status","code":..,"reason":..,"message":..}) its fields are used;
 * otherwise the reason is the standard one for the status code and the
 * message quotes the start of the body (control characters replaced).
 * `what` ("GET /api/v1/pods") prefixes non-Status messages. */
void kube_error_from_response(struct kube_error *err, int http_status, const char *what,
                              const char *body, size_t len);

/* Same for a parsed Status object (a watch ERROR event); returns its code
 * (0 when absent). */
int kube_error_from_status(struct kube_error *err, const json_t *status);

/* Incremental splitter of a newline-delimited stream (watch bodies): bytes
 * arrive in arbitrary chunks, a line may span many chunks, a chunk may hold
 * many lines. Each complete line (without "\n", a trailing "\r" removed;
 * empty lines skipped) goes to on_line. At most `max` bytes of an unfinished
 * line are buffered. Owner: the struct's buffer, freed by kube_lines_free. */
struct kube_lines {
    char *buf;
    size_t len, cap, max;
    size_t peak; /* largest buffer size reached, for the memory bound tests */
};
typedef int (*kube_line_fn)(const char *line, size_t len, void *ctx);

void kube_lines_init(struct kube_lines *lines, size_t max);
/* 0 ok; -1 when a line exceeds max (*too_large set) or out of memory, or
 * on_line's non-zero return (returned as is). */
int kube_lines_feed(struct kube_lines *lines, const char *data, size_t len, kube_line_fn on_line,
                    void *ctx, bool *too_large);
/* Bytes of an unfinished last line still buffered (a stream ending here was cut). */
size_t kube_lines_pending(const struct kube_lines *lines);
void kube_lines_free(struct kube_lines *lines);

/* Standard base64 (RFC 4648, padding optional, whitespace ignored) into a
 * malloc'ed, NUL-terminated buffer (*out, *outlen without the NUL).
 * -1 on a character outside the alphabet or a bad length. */
int kube_base64_decode(const char *in, size_t inlen, unsigned char **out, size_t *outlen);

/* Retry arithmetic (see docs/kube.md). */
enum kube_retry_class {
    KUBE_RETRY_NEVER,      /* final answer */
    KUBE_RETRY_ALWAYS,     /* the server did not act on the request: any verb */
    KUBE_RETRY_IDEMPOTENT, /* may have acted: only GET/LIST */
};
/* For an HTTP status (curl_code 0) or a libcurl error (http_status 0). */
enum kube_retry_class kube_retry_class_of(int http_status, int curl_code);
/* Wait before retry number `retry` (1 = first retry): min(max, initial *
 * 2^(retry-1)) scaled by a jitter factor in [0.5, 1) taken from `random01`
 * (in [0,1)); at least retry_after_ms (already capped by the caller) when >0. */
long kube_backoff_ms(const struct kube_retry_policy *policy, int retry, double random01,
                     long retry_after_ms);
/* Parses a Retry-After header value in seconds (HTTP dates are not used by the
 * API server): milliseconds, capped at 60 s; 0 when absent or unparsable. */
long kube_retry_after_ms(const char *value);

#endif

/* wire.c -- see wire.h. */
#include "wire.h"

#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kube_fail(struct kube_error *err, int http_status, const char *reason, const char *fmt, ...)
{
    if (err == NULL)
        return -1;
    err->http_status = http_status;
    err->retry_after_ms = 0;
    snprintf(err->reason, sizeof err->reason, "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* The reason the API server itself would give (metav1.StatusReason). */
static const char *reason_for_status(int code)
{
    switch (code) {
    case 400:
        return "BadRequest";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "NotFound";
    case 405:
        return "MethodNotAllowed";
    case 406:
        return "NotAcceptable";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "RequestEntityTooLarge";
    case 415:
        return "UnsupportedMediaType";
    case 422:
        return "Invalid";
    case 429:
        return "TooManyRequests";
    case 500:
        return "InternalError";
    case 503:
        return "ServiceUnavailable";
    case 504:
        return "Timeout";
    default:
        return code >= 500 ? "InternalError" : "Unknown";
    }
}

int kube_error_from_status(struct kube_error *err, const json_t *status)
{
    json_int_t code = json_integer_value(json_object_get(status, "code"));
    const char *reason = json_string_value(json_object_get(status, "reason"));
    const char *message = json_string_value(json_object_get(status, "message"));
    if (code < 0 || code > 999)
        code = 0;
    if (reason == NULL || reason[0] == '\0')
        reason = code ? reason_for_status((int)code) : "Unknown";
    kube_fail(err, (int)code, reason, "%s", message ? message : "(Status without a message)");
    return (int)code;
}

/* A short printable quote of a non-Status body for the message. */
static void quote_body(char *out, size_t outlen, const char *body, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 4 < outlen && i < 200; i++) {
        unsigned char c = (unsigned char)body[i];
        out[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : ' ';
    }
    if (len > 200 && n + 4 < outlen) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

void kube_error_from_response(struct kube_error *err, int http_status, const char *what,
                              const char *body, size_t len)
{
    if (body != NULL && len > 0) {
        json_t *root = json_loadb(body, len, 0, NULL);
        const char *kind = json_string_value(json_object_get(root, "kind"));
        if (kind != NULL && strcmp(kind, "Status") == 0) {
            kube_error_from_status(err, root);
            /* The HTTP status is authoritative: a Status without code
             * (seen from proxies) must not read as "no response". */
            err->http_status = http_status;
            json_decref(root);
            return;
        }
        json_decref(root);
    }
    char quoted[256] = "";
    quote_body(quoted, sizeof quoted, body ? body : "", body ? len : 0);
    kube_fail(err, http_status, reason_for_status(http_status), "%s: HTTP %d%s%s", what,
              http_status, quoted[0] ? ": " : " with an empty body", quoted);
}

void kube_lines_init(struct kube_lines *lines, size_t max)
{
    memset(lines, 0, sizeof *lines);
    lines->max = max;
}

static int emit_line(const char *line, size_t len, kube_line_fn on_line, void *ctx)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return 0;
    return on_line(line, len, ctx);
}

/* Appends data to the unfinished-line buffer, bounded by max. */
static int buffer_append(struct kube_lines *lines, const char *data, size_t len, bool *too_large)
{
    if (lines->len + len > lines->max) {
        *too_large = true;
        return -1;
    }
    if (lines->len + len > lines->cap) {
        size_t cap = lines->cap ? lines->cap : 4096;
        while (cap < lines->len + len)
            cap *= 2;
        if (cap > lines->max)
            cap = lines->max;
        char *grown = realloc(lines->buf, cap);
        if (grown == NULL)
            return -1;
        lines->buf = grown;
        lines->cap = cap;
        if (cap > lines->peak)
            lines->peak = cap;
    }
    memcpy(lines->buf + lines->len, data, len);
    lines->len += len;
    return 0;
}

int kube_lines_feed(struct kube_lines *lines, const char *data, size_t len, kube_line_fn on_line,
                    void *ctx, bool *too_large)
{
    *too_large = false;
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        if (nl == NULL)
            return buffer_append(lines, data, len, too_large);
        size_t part = (size_t)(nl - data);
        int rc;
        if (lines->len == 0) {
            /* Whole line inside this chunk: no copy. */
            rc = emit_line(data, part, on_line, ctx);
        } else {
            if (buffer_append(lines, data, part, too_large) != 0)
                return -1;
            rc = emit_line(lines->buf, lines->len, on_line, ctx);
            lines->len = 0;
        }
        if (rc != 0)
            return rc;
        data = nl + 1;
        len -= part + 1;
    }
    return 0;
}

size_t kube_lines_pending(const struct kube_lines *lines)
{
    return lines->len;
}

void kube_lines_free(struct kube_lines *lines)
{
    free(lines->buf);
    lines->buf = NULL;
    lines->len = lines->cap = 0;
}

static int base64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* No library we link exposes a base64 decoder, and kubeconfig *-data fields
 * must be decoded to hand PEM blobs to libcurl, hence these few lines. */
int kube_base64_decode(const char *in, size_t inlen, unsigned char **out, size_t *outlen)
{
    unsigned char *buf = malloc(inlen / 4 * 3 + 4);
    if (buf == NULL)
        return -1;
    size_t n = 0, pad = 0;
    unsigned int acc = 0, bits = 0, symbols = 0;
    for (size_t i = 0; i < inlen; i++) {
        unsigned char c = (unsigned char)in[i];
        if (isspace(c))
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int v = base64_value(c);
        if (v < 0 || pad > 0) /* a foreign character, or data after padding */
            goto bad;
        acc = (acc << 6) | (unsigned int)v;
        bits += 6;
        symbols++;
        if (bits >= 8) {
            bits -= 8;
            buf[n++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (symbols % 4 == 1 || pad > 2 || (pad > 0 && (symbols + pad) % 4 != 0))
        goto bad;
    buf[n] = '\0';
    *out = buf;
    *outlen = n;
    return 0;
bad:
    free(buf);
    return -1;
}

enum kube_retry_class kube_retry_class_of(int http_status, int curl_code)
{
    if (curl_code != 0) {
        switch (curl_code) {
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
            return KUBE_RETRY_ALWAYS; /* nothing was sent */
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
            return KUBE_RETRY_IDEMPOTENT;
        default:
            return KUBE_RETRY_NEVER; /* TLS, bad URL, ...: retrying cannot help */
        }
    }
    switch (http_status) {
    case 429:
        return KUBE_RETRY_ALWAYS; /* rejected before any handler ran */
    case 500:
    case 502:
    case 503:
    case 504:
        return KUBE_RETRY_IDEMPOTENT;
    default:
        return KUBE_RETRY_NEVER;
    }
}

long kube_backoff_ms(const struct kube_retry_policy *policy, int retry, double random01,
                     long retry_after_ms)
{
    long wait = policy->initial_backoff_ms;
    for (int i = 1; i < retry && wait < policy->max_backoff_ms; i++)
        wait *= 2;
    if (wait > policy->max_backoff_ms)
        wait = policy->max_backoff_ms;
    if (random01 < 0 || random01 >= 1)
        random01 = 0;
    wait = (long)((double)wait * (0.5 + random01 / 2));
    if (retry_after_ms > wait)
        wait = retry_after_ms;
    return wait;
}

long kube_retry_after_ms(const char *value)
{
    if (value == NULL)
        return 0;
    while (isspace((unsigned char)*value))
        value++;
    if (!isdigit((unsigned char)*value))
        return 0;
    errno = 0;
    char *end;
    long seconds = strtol(value, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    if (errno != 0 || *end != '\0')
        return 0;
    return seconds > 60 ? 60000 : seconds * 1000;
}

bool kube_error_transient(const struct kube_error *err)
{
    switch (err->http_status) {
    case 408:
    case 429:
    case 500:
    case 502:
    case 503:
    case 504:
        return true;
    case 0:
        return strcmp(err->reason, "ConnectError") == 0 ||
               strcmp(err->reason, "ConnectionError") == 0 || strcmp(err->reason, "Timeout") == 0;
    default:
        return false;
    }
}

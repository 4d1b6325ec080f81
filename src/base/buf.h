/* buf.h -- a growable, NUL-terminated text buffer (curl's dynbuf, libc only).
 *
 * Used for the large generated answers (the extender's /metrics and
 * /ui/pool.json at 5,000 nodes: about 1-3 MB, the device plugin's
 * /metrics), the filter/prioritize replies written node by node, HTTP
 * request and response bodies, and the CLI's tables.
 *
 * Why not stdio (open_memstream) or jansson: both are several times slower
 * per line, and the extender builds these answers while the cache's
 * state_lock is held, which binds and the reflectors wait for.
 *
 * Errors: out of memory is sticky: appends after a failure do nothing,
 * buf_add() returns false, buf_take() returns NULL and frees what was
 * there. A buffer that never failed always holds a NUL after data[len].
 * Ownership: data belongs to the buf until buf_take() hands it over (or
 * buf_free()). Threads: one owner at a time. Init: `struct buf b = {0};`
 * (first_cap, optional, sets the first allocation; 0 = 4 KiB). */
#ifndef GP_BUF_H
#define GP_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compiler.h"

struct buf {
    char *data;
    size_t len, cap;
    size_t first_cap;
    bool failed;
};

/* Room for `more` bytes plus the NUL; false (and failed) when out of memory. */
bool buf_grow(struct buf *b, size_t more);

static inline bool buf_reserve(struct buf *b, size_t more)
{
    if (b->failed)
        return false;
    return b->len + more + 1 <= b->cap || buf_grow(b, more);
}

/* Appends n bytes; false when out of memory (now or before). */
static inline bool buf_add(struct buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n))
        return false;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

static inline bool buf_str(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

/* Decimal digits of v. */
bool buf_u64(struct buf *b, uint64_t v);
/* Formatted text, any length. */
bool buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* A JSON string literal, quotes included (", \ and control bytes escaped). */
bool buf_json_string(struct buf *b, const char *s);

/* The text (NUL-terminated; *len without the NUL, len may be NULL) for the
 * caller to free(), or NULL when out of memory. The buf is empty after. */
GP_MUST_USE char *buf_take(struct buf *b, size_t *len);
/* Frees the text; the buf is empty (and not failed) after. */
void buf_free(struct buf *b);

#endif

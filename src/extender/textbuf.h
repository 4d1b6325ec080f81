/* textbuf.h -- an append-only text buffer for the large generated answers
 * (/metrics, /ui/pool.json at 5,000 nodes: about 1-3 MB) and the
 * filter/prioritize replies written node by node (protocol.c).
 *
 * Why not stdio or jansson: both are several times slower per line here,
 * and these answers are built while the cache's state_lock is held, which
 * binds and the reflectors wait for. Out of memory is sticky: appends after
 * a failure do nothing and textbuf_take() returns NULL.
 * Ownership: the buffer is the textbuf's until textbuf_take() hands it over. */
#ifndef GP_EXTENDER_TEXTBUF_H
#define GP_EXTENDER_TEXTBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct textbuf {
    char *data;
    size_t len, cap;
    bool failed;
};

static inline bool textbuf_reserve(struct textbuf *b, size_t more)
{
    if (b->failed)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

static inline void textbuf_add(struct textbuf *b, const char *s, size_t n)
{
    if (textbuf_reserve(b, n)) {
        memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len] = '\0';
    }
}

static inline void textbuf_str(struct textbuf *b, const char *s)
{
    textbuf_add(b, s, strlen(s));
}

static inline void textbuf_u64(struct textbuf *b, uint64_t v)
{
    char digits[24];
    size_t n = sizeof(digits);
    do {
        digits[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    textbuf_add(b, digits + n, sizeof(digits) - n);
}

/* A short formatted piece (at most 511 bytes). */
__attribute__((format(printf, 2, 3))) static inline void textbuf_printf(struct textbuf *b,
                                                                        const char *fmt, ...)
{
    char piece[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(piece, sizeof(piece), fmt, ap);
    va_end(ap);
    if (n > 0)
        textbuf_add(b, piece, (size_t)n < sizeof(piece) ? (size_t)n : sizeof(piece) - 1);
}

/* A JSON string literal, quotes included. */
static inline void textbuf_json_string(struct textbuf *b, const char *s)
{
    textbuf_add(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[2] = {'\\', (char)*c};
            textbuf_add(b, esc, 2);
        } else if (*c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof(esc), "\\u%04x", *c);
            textbuf_add(b, esc, 6);
        } else {
            textbuf_add(b, (const char *)c, 1);
        }
    }
    textbuf_add(b, "\"", 1);
}

/* The text (NUL-terminated) for the caller to free, or NULL when out of memory. */
static inline char *textbuf_take(struct textbuf *b, size_t *len)
{
    char *out = b->failed ? NULL : b->data;
    if (b->failed)
        free(b->data);
    else if (!out && textbuf_reserve(b, 0)) {
        out = b->data;  /* empty text */
        out[0] = '\0';
    }
    *len = out ? b->len : 0;
    b->data = NULL;
    b->len = b->cap = 0;
    return out;
}

#endif

/* buf.c -- growth, numbers, formatting and hand-over for struct buf (see buf.h). */
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>

bool buf_grow(struct buf *b, size_t more)
{
    if (b->failed)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : (b->first_cap ? b->first_cap : 4096);
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

bool buf_u64(struct buf *b, uint64_t v)
{
    char digits[24];
    size_t n = sizeof digits;
    do {
        digits[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return buf_add(b, digits + n, sizeof digits - n);
}

bool buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    /* Most pieces fit the room already there: one vsnprintf, no copy. */
    if (!buf_reserve(b, 0))
        return false;
    va_list again;
    va_copy(again, ap);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->data + b->len, room, fmt, ap);
    if (n >= 0 && (size_t)n >= room && buf_reserve(b, (size_t)n))
        n = vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
    va_end(again);
    if (n < 0 || b->failed) {
        if (!b->failed)
            b->data[b->len] = '\0';
        return false;
    }
    b->len += (size_t)n;
    return true;
}

bool buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool ok = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return ok;
}

bool buf_json_string(struct buf *b, const char *s)
{
    buf_add(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[2] = {'\\', (char)*c};
            buf_add(b, esc, 2);
        } else if (*c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            buf_add(b, esc, 6);
        } else {
            buf_add(b, (const char *)c, 1);
        }
    }
    return buf_add(b, "\"", 1);
}

char *buf_take(struct buf *b, size_t *len)
{
    char *out = NULL;
    if (!b->failed && (b->data != NULL || buf_grow(b, 0))) {
        out = b->data;
        out[b->len] = '\0'; /* an empty buf had no NUL yet */
    }
    if (len != NULL)
        *len = out != NULL ? b->len : 0;
    if (out == NULL)
        free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
    return out;
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

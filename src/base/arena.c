/* arena.c -- chunked bump allocator (see arena.h). */
#include "arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK_MIN 4096

struct arena_chunk {
    struct arena_chunk *next;
    size_t size;
    size_t used;
    _Alignas(16) unsigned char data[];
};

void *arena_alloc(struct arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    struct arena_chunk *c = a->head;
    if (c == NULL || c->size - c->used < size) {
        size_t cap = size > ARENA_CHUNK_MIN ? size : ARENA_CHUNK_MIN;
        if (cap > SIZE_MAX - sizeof *c)
            return NULL;
        c = malloc(sizeof *c + cap);
        if (c == NULL)
            return NULL;
        c->next = a->head;
        c->size = cap;
        c->used = 0;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

void *arena_calloc(struct arena *a, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    return arena_alloc(a, n * size);
}

char *arena_strdup(struct arena *a, const char *s)
{
    size_t len = strlen(s);
    char *p = arena_alloc(a, len + 1);
    if (p != NULL)
        memcpy(p, s, len + 1);
    return p;
}

char *arena_printf(struct arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = arena_alloc(a, (size_t)n + 1);
    if (p == NULL)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void arena_free(struct arena *a)
{
    struct arena_chunk *c = a->head;
    while (c != NULL) {
        struct arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

void arena_adopt(struct arena *into, struct arena *from)
{
    if (from->head == NULL)
        return;
    /* into's newest block stays at the head, so its free space still
     * serves the next allocation; from's blocks go right behind it. */
    struct arena_chunk *last = from->head;
    while (last->next != NULL)
        last = last->next;
    if (into->head == NULL) {
        into->head = from->head;
    } else {
        last->next = into->head->next;
        into->head->next = from->head;
    }
    from->head = NULL;
}

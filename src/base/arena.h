/* arena.h -- a bump allocator for per-request scratch memory.
 *
 * RPC replies are built as protobuf-c structs full of small strings and
 * arrays; allocating them all from one arena and releasing it after the
 * reply is packed gives every byte one owner and the error paths one free.
 * Allocation failure returns NULL; the arena stays valid. Not thread-safe. */
#ifndef GP_ARENA_H
#define GP_ARENA_H

#include <stddef.h>

#include "compiler.h"

struct arena_chunk;

struct arena {
    struct arena_chunk *head;
};

/* A braced initialiser, not a block: */
/* clang-format off */
#define ARENA_INIT {NULL}
/* clang-format on */

GP_MUST_USE void *arena_alloc(struct arena *a, size_t size); /* zeroed, 16-aligned */
GP_MUST_USE void *arena_calloc(struct arena *a, size_t n, size_t size);
GP_MUST_USE char *arena_strdup(struct arena *a, const char *s);
GP_MUST_USE char *arena_printf(struct arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void arena_free(struct arena *a); /* back to empty; reusable */
/* Moves every block of `from` into `into` (pointers stay valid; `into`
 * now frees them) and leaves `from` empty. */
void arena_adopt(struct arena *into, struct arena *from);

#endif

/* conn_table.c -- open connections by client address, the choice of the one that gives way, the
 * request deadline (see conn_table.h). */
#include "conn_table.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

/* The connections of one client address. An IPv4-mapped IPv6 address is
 * its IPv4 address: a dual-stack listener must not count one client twice. */
struct conn_group {
    unsigned char family; /* 4, 6, or 0 for an address that is neither */
    unsigned char bytes[16];
    unsigned live;    /* entries not shut */
    unsigned entries; /* all entries: the group goes with the last */
    struct conn_group *next;
};

static void group_key(const struct sockaddr *addr, unsigned char *family, unsigned char bytes[16])
{
    *family = 0;
    memset(bytes, 0, 16);
    if (addr && addr->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)addr;
        *family = 4;
        memcpy(bytes, &s4->sin_addr, 4);
    } else if (addr && addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)addr;
        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
            *family = 4;
            memcpy(bytes, s6->sin6_addr.s6_addr + 12, 4);
        } else {
            *family = 6;
            memcpy(bytes, s6->sin6_addr.s6_addr, 16);
        }
    }
}

/* FNV-1a. Chains cannot grow past the connections open, which the HTTP
 * library bounds, so a client that picks colliding addresses only makes
 * its own lookups linear in that bound. */
static unsigned group_hash(unsigned char family, const unsigned char bytes[16])
{
    uint32_t h = 2166136261u;
    h = (h ^ family) * 16777619u;
    for (int i = 0; i < 16; i++)
        h = (h ^ bytes[i]) * 16777619u;
    return h;
}

int conn_table_init(struct conn_table *t, unsigned capacity)
{
    memset(t, 0, sizeof *t);
    t->capacity = capacity ? capacity : 1;
    /* About one group per connection at worst: chains of one or two. */
    unsigned n = 16;
    while (n < t->capacity && n < (1u << 20))
        n *= 2;
    t->buckets = calloc(n, sizeof *t->buckets);
    if (!t->buckets)
        return -1;
    t->nbuckets = n;
    return 0;
}

void conn_table_destroy(struct conn_table *t)
{
    while (t->head)
        conn_table_remove(t, t->head);
    free(t->buckets);
    memset(t, 0, sizeof *t);
}

static void shut(struct conn_table *t, struct conn_entry *e)
{
    (void)shutdown(e->fd, SHUT_RDWR); /* best effort: the peer may be gone already */
    e->shut = true;
    e->group->live--;
    t->live--;
}

static struct conn_group **group_slot(struct conn_table *t, unsigned char family,
                                      const unsigned char bytes[16])
{
    struct conn_group **p = &t->buckets[group_hash(family, bytes) & (t->nbuckets - 1)];
    while (*p && ((*p)->family != family || memcmp((*p)->bytes, bytes, 16) != 0))
        p = &(*p)->next;
    return p;
}

enum conn_admission conn_table_make_room(struct conn_table *t, const struct sockaddr *addr)
{
    if (t->live < t->capacity)
        return CONN_ADMITTED;
    /* One pass: the idle entry of the heaviest address, oldest first. The
     * table holds at most a few thousand entries, and this runs only when
     * it is full, once per accept. */
    struct conn_entry *victim = NULL;
    for (struct conn_entry *e = t->head; e; e = e->next) {
        if (e->busy || e->shut)
            continue;
        if (!victim || e->group->live > victim->group->live ||
            (e->group->live == victim->group->live && e->since_ns < victim->since_ns))
            victim = e;
    }
    unsigned char family, bytes[16];
    group_key(addr, &family, bytes);
    struct conn_group *own = *group_slot(t, family, bytes);
    unsigned holds = own ? own->live : 0;
    /* The newcomer's address must still hold fewer than the victim's
     * after the swap, or it has nothing yet. Otherwise flooding addresses
     * would only trade slots among themselves, a connection (and, with a
     * thread per connection, a thread) for every reconnect, where a
     * refusal is a close at accept. */
    if (!victim || (holds > 0 && holds + 1 >= victim->group->live))
        return CONN_REFUSED;
    shut(t, victim);
    return CONN_EVICTED;
}

struct conn_entry *conn_table_add(struct conn_table *t, int fd, const struct sockaddr *addr,
                                  int64_t now_ns)
{
    unsigned char family, bytes[16];
    group_key(addr, &family, bytes);
    struct conn_group **slot = group_slot(t, family, bytes);
    struct conn_group *g = *slot;
    struct conn_entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    if (!g) {
        if (!(g = calloc(1, sizeof *g))) {
            free(e);
            return NULL;
        }
        g->family = family;
        memcpy(g->bytes, bytes, 16);
        *slot = g; /* the end of its chain */
    }
    g->live++;
    g->entries++;
    t->live++;
    e->fd = fd;
    e->since_ns = now_ns;
    e->group = g;
    e->next = t->head;
    if (t->head)
        t->head->prev = e;
    t->head = e;
    return e;
}

void conn_table_remove(struct conn_table *t, struct conn_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        t->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    struct conn_group *g = e->group;
    if (!e->shut) {
        g->live--;
        t->live--;
    }
    if (--g->entries == 0) {
        struct conn_group **p = group_slot(t, g->family, g->bytes);
        *p = g->next;
        free(g);
    }
    free(e);
}

void conn_table_set_busy(struct conn_entry *e, bool busy, int64_t now_ns)
{
    e->busy = busy;
    e->since_ns = now_ns;
}

unsigned conn_table_shut_expired(struct conn_table *t, int64_t now_ns, int64_t deadline_ns)
{
    unsigned n = 0;
    for (struct conn_entry *e = t->head; e; e = e->next) {
        if (e->busy || e->shut || now_ns - e->since_ns < deadline_ns)
            continue;
        shut(t, e);
        n++;
    }
    return n;
}

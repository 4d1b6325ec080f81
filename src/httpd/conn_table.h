/* conn_table.h -- the connections an HTTP server holds, and which one gives way when they are
 * too many.
 *
 * Refusing new connections once a fixed table is full lets whoever fills it
 * first keep everyone else out: nine addresses with idle sockets locked the
 * extender's liveness probe and kube-scheduler out for as long as they kept
 * reconnecting (review N3, N4). This table admits a newcomer that matters
 * while some connection is idle, and sheds that one instead:
 *
 *   - live connections are counted up to `capacity`; at the limit, admitting
 *     one more first shuts down a victim;
 *   - a victim is never busy (its request complete and being answered: the
 *     handler runs, or the reply is on its way), only idle (between
 *     requests, or still sending its request, trickling included);
 *   - the victim comes from the client address that holds the most live
 *     connections, and is its connection that has waited longest since
 *     accept or its previous reply;
 *   - the newcomer gets the victim's slot if its own address holds no
 *     connection yet, or at least two fewer than the victim's: the
 *     kubelet's probe and kube-scheduler hold a handful of connections from
 *     one address each, so whoever floods the port from fewer addresses than
 *     it has connections pays first. Flooding addresses cannot take slots
 *     from one another, which would only churn (a connection, with a thread
 *     per connection a thread, for every reconnect): their reconnects are
 *     refused and the table stays as it is;
 *   - a just-accepted connection is the last one of its address to go, by
 *     which time it has normally sent its request and is busy;
 *   - when every live connection is busy, the newcomer is refused: those are
 *     requests being served, and the handlers' threads are the real cost.
 *
 * Clients that each hold a single connection from as many addresses as the
 * table has slots still take turns with everyone else (each newcomer sheds
 * the connection idle longest); a NetworkPolicy is the fence against that.
 *
 * A victim is shut down (never closed: the HTTP library owns the descriptor
 * and closes it when it sees the end of the stream), so it stays open a
 * short while after it stopped counting; the caller leaves the library room
 * for that (httpd.c: the reserve). The same shutdown ends connections whose
 * request has not arrived within a deadline.
 *
 * Not thread-safe: httpd.c calls every function under one lock, which also
 * makes the shutdown safe (a descriptor is removed from the table before it
 * is closed, under that lock, so its number is never reused meanwhile).
 * Ownership: the table owns its entries and address groups; conn_table_add's
 * entry lives until conn_table_remove. */
#ifndef GP_HTTPD_CONN_TABLE_H
#define GP_HTTPD_CONN_TABLE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "compiler.h"

struct conn_group;

/* One open connection. Fields are read-only outside conn_table.c. */
struct conn_entry {
    int fd;
    int64_t since_ns; /* accepted, or the previous reply done */
    bool busy;        /* the request is complete and being answered */
    bool shut;        /* shut down here (evicted or past the deadline): no longer counted */
    struct conn_group *group;
    struct conn_entry *prev, *next;
};

struct conn_table {
    unsigned capacity; /* live connections before a newcomer evicts one */
    unsigned live;     /* entries not shut */
    struct conn_entry *head;
    struct conn_group **buckets; /* address -> group, chained */
    unsigned nbuckets;           /* a power of two */
};

/* capacity >= 1. -1 when out of memory. */
GP_MUST_USE int conn_table_init(struct conn_table *t, unsigned capacity);
/* Frees every entry and group left. */
void conn_table_destroy(struct conn_table *t);

enum conn_admission {
    CONN_ADMITTED, /* room was left */
    CONN_EVICTED,  /* admitted after shutting down an idle connection */
    CONN_REFUSED,  /* full: every live connection busy, or the newcomer's address holds enough */
};
/* Called before a connection from addr (NULL: an unknown address) is
 * accepted: makes room for it when the table is full. */
enum conn_admission conn_table_make_room(struct conn_table *t, const struct sockaddr *addr);
/* The connection accepted on fd from addr (NULL: counted as one unknown
 * address). NULL when out of memory: the connection is then not tracked. */
struct conn_entry *conn_table_add(struct conn_table *t, int fd, const struct sockaddr *addr,
                                  int64_t now_ns);
/* The library closes e's descriptor next; e is freed. */
void conn_table_remove(struct conn_table *t, struct conn_entry *e);
/* busy: the request has arrived; false: its reply is done, and the
 * connection waits for the next one (both restart since_ns). */
void conn_table_set_busy(struct conn_entry *e, bool busy, int64_t now_ns);
/* Shuts down every idle connection whose request has not arrived within
 * deadline_ns of since_ns; how many. */
unsigned conn_table_shut_expired(struct conn_table *t, int64_t now_ns, int64_t deadline_ns);

#endif

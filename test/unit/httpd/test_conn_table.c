/* Unit tests: the connection table (conn_table.h) on socketpairs -- room left, the victim when
 * full (the heaviest address's longest-waiting idle connection; never a busy one), a newcomer
 * that takes a slot only from an address holding two more (or holds none), refusal when every
 * connection is busy, v4-mapped addresses counted with their IPv4 address, the request
 * deadline, groups freed with their last connection. A shut-down connection shows as EOF on its
 * peer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn_table.h"

#define MS 1000000LL

/* A connection: [0] is the server's end the table holds, [1] the client's. */
struct pair {
    int fd[2];
    struct conn_entry *e;
};

static struct sockaddr_in v4(const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1234)};
    assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    return a;
}

static void open_pair(struct conn_table *t, struct pair *p, const struct sockaddr *addr,
                      int64_t now)
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fd), 0);
    p->e = conn_table_add(t, p->fd[0], addr, now);
    assert_non_null(p->e);
}

static void close_pair(struct conn_table *t, struct pair *p)
{
    conn_table_remove(t, p->e);
    close(p->fd[0]);
    close(p->fd[1]);
}

/* Whether the table shut the server's end down: the client reads EOF. */
static bool was_shut(const struct pair *p)
{
    struct pollfd q = {.fd = p->fd[1], .events = POLLIN};
    if (poll(&q, 1, 0) != 1)
        return false;
    char c;
    return read(p->fd[1], &c, 1) == 0;
}

static void test_room_then_heaviest_address_oldest_idle(void **state)
{
    (void)state;
    struct conn_table t;
    assert_int_equal(conn_table_init(&t, 4), 0);
    struct sockaddr_in a = v4("10.0.0.1"), b = v4("10.0.0.2"), c = v4("10.0.0.3"),
                       d = v4("10.0.0.4"), e = v4("10.0.0.5");
    struct pair p[6];
    /* b's single connection is the oldest of all; a holds three. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&b), CONN_ADMITTED);
    open_pair(&t, &p[0], (struct sockaddr *)&b, 1 * MS);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&a), CONN_ADMITTED);
        open_pair(&t, &p[i], (struct sockaddr *)&a, (10 + i) * MS);
    }
    assert_int_equal(t.live, 4);
    /* Full: the newcomer from c sheds a's longest-waiting one, not b's older one. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&c), CONN_EVICTED);
    assert_true(was_shut(&p[1]));
    assert_false(was_shut(&p[0]));
    assert_false(was_shut(&p[2]));
    assert_true(p[1].e->shut);
    assert_int_equal(t.live, 3);
    open_pair(&t, &p[4], (struct sockaddr *)&c, 20 * MS);
    /* A reply done restarts the wait: p[2] becomes a's newest. */
    conn_table_set_busy(p[2].e, true, 21 * MS);
    conn_table_set_busy(p[2].e, false, 22 * MS);
    /* c (1) and a (2) would only swap a slot: refused, as is a itself. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&c), CONN_REFUSED);
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&a), CONN_REFUSED);
    assert_false(was_shut(&p[3]));
    assert_int_equal(t.live, 4);
    /* A new address sheds a's oldest idle one, p[3]. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&d), CONN_EVICTED);
    assert_true(was_shut(&p[3]));
    assert_false(was_shut(&p[2]));
    open_pair(&t, &p[5], (struct sockaddr *)&d, 23 * MS);
    /* One each: the connection waiting longest goes, b's. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&e), CONN_EVICTED);
    assert_true(was_shut(&p[0]));
    assert_false(was_shut(&p[2]) || was_shut(&p[4]) || was_shut(&p[5]));
    for (int i = 0; i < 6; i++)
        close_pair(&t, &p[i]);
    assert_int_equal(t.live, 0);
    assert_null(t.head);
    conn_table_destroy(&t);
}

/* A newcomer whose address holds some connections gets a slot only from an
 * address that holds at least two more. */
static void test_newcomer_takes_only_from_a_heavier_address(void **state)
{
    (void)state;
    struct conn_table t;
    assert_int_equal(conn_table_init(&t, 4), 0);
    struct sockaddr_in a = v4("10.0.0.1"), b = v4("10.0.0.2");
    struct pair p[5];
    open_pair(&t, &p[0], (struct sockaddr *)&b, 1 * MS);
    for (int i = 1; i < 4; i++)
        open_pair(&t, &p[i], (struct sockaddr *)&a, (10 + i) * MS);
    /* b holds 1, a 3: b takes one of a's. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&b), CONN_EVICTED);
    assert_true(was_shut(&p[1]));
    open_pair(&t, &p[4], (struct sockaddr *)&b, 20 * MS);
    /* 2 and 2 now: neither takes from the other. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&b), CONN_REFUSED);
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&a), CONN_REFUSED);
    /* An unknown address holds none yet; 2 and 2: the one waiting longest goes. */
    assert_int_equal(conn_table_make_room(&t, NULL), CONN_EVICTED);
    assert_true(was_shut(&p[0]));
    assert_false(was_shut(&p[2]));
    for (int i = 0; i < 5; i++)
        close_pair(&t, &p[i]);
    conn_table_destroy(&t);
}

static void test_busy_connections_are_never_shed(void **state)
{
    (void)state;
    struct conn_table t;
    assert_int_equal(conn_table_init(&t, 3), 0);
    struct sockaddr_in a = v4("10.0.0.1"), b = v4("10.0.0.2");
    struct pair p[3];
    for (int i = 0; i < 3; i++)
        open_pair(&t, &p[i], (struct sockaddr *)(i < 2 ? &a : &b), i * MS);
    conn_table_set_busy(p[0].e, true, 5 * MS);
    conn_table_set_busy(p[1].e, true, 5 * MS);
    struct sockaddr_in c = v4("10.0.0.3");
    /* a's connections are busy: b's idle one goes although a is heavier. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&c), CONN_EVICTED);
    assert_true(was_shut(&p[2]));
    assert_false(was_shut(&p[0]));
    /* The shut one stays listed (its descriptor is still open) but is
     * counted no more; with every live connection busy, refused. */
    conn_table_set_busy(p[2].e, true, 6 * MS);
    assert_int_equal(t.live, 2);
    struct pair q;
    open_pair(&t, &q, (struct sockaddr *)&b, 7 * MS);
    conn_table_set_busy(q.e, true, 7 * MS);
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&c), CONN_REFUSED);
    assert_false(was_shut(&p[0]) || was_shut(&p[1]) || was_shut(&q));
    /* A reply done makes it idle again: now it can go. */
    conn_table_set_busy(p[1].e, false, 8 * MS);
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&c), CONN_EVICTED);
    assert_true(was_shut(&p[1]));
    for (int i = 0; i < 3; i++)
        close_pair(&t, &p[i]);
    close_pair(&t, &q);
    conn_table_destroy(&t);
}

/* ::ffff:10.0.0.1 is 10.0.0.1: together they are the heaviest address. */
static void test_v4_mapped_is_its_ipv4_address(void **state)
{
    (void)state;
    struct conn_table t;
    assert_int_equal(conn_table_init(&t, 3), 0);
    struct sockaddr_in a = v4("10.0.0.1"), b = v4("10.0.0.2");
    struct sockaddr_in6 mapped = {.sin6_family = AF_INET6};
    assert_int_equal(inet_pton(AF_INET6, "::ffff:10.0.0.1", &mapped.sin6_addr), 1);
    struct sockaddr_in6 other = {.sin6_family = AF_INET6};
    assert_int_equal(inet_pton(AF_INET6, "fd00::1", &other.sin6_addr), 1);
    struct pair p[4];
    open_pair(&t, &p[0], (struct sockaddr *)&b, 1 * MS);
    open_pair(&t, &p[1], (struct sockaddr *)&a, 2 * MS);
    open_pair(&t, &p[2], (struct sockaddr *)&mapped, 3 * MS);
    assert_ptr_equal(p[1].e->group, p[2].e->group);
    /* A newcomer from the mapped address's IPv4 twin holds 2: refused. */
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&a), CONN_REFUSED);
    assert_int_equal(conn_table_make_room(&t, (struct sockaddr *)&other), CONN_EVICTED);
    assert_true(was_shut(&p[1]));
    assert_false(was_shut(&p[0]));
    open_pair(&t, &p[3], (struct sockaddr *)&other, 4 * MS);
    assert_ptr_not_equal(p[3].e->group, p[0].e->group);
    for (int i = 0; i < 4; i++)
        close_pair(&t, &p[i]);
    conn_table_destroy(&t);
}

static void test_request_deadline(void **state)
{
    (void)state;
    struct conn_table t;
    assert_int_equal(conn_table_init(&t, 8), 0);
    struct sockaddr_in a = v4("10.0.0.1");
    struct pair p[3];
    for (int i = 0; i < 3; i++)
        open_pair(&t, &p[i], (struct sockaddr *)&a, 0);
    conn_table_set_busy(p[1].e, true, 100 * MS);  /* being answered: exempt */
    conn_table_set_busy(p[2].e, false, 900 * MS); /* replied to late: its wait restarted */
    assert_int_equal(conn_table_shut_expired(&t, 1000 * MS, 1000 * MS), 1);
    assert_true(was_shut(&p[0]));
    assert_false(was_shut(&p[1]) || was_shut(&p[2]));
    assert_int_equal(t.live, 2);
    assert_int_equal(conn_table_shut_expired(&t, 1000 * MS, 1000 * MS), 0); /* once */
    assert_int_equal(conn_table_shut_expired(&t, 1900 * MS, 1000 * MS), 1);
    assert_true(was_shut(&p[2]));
    for (int i = 0; i < 3; i++)
        close_pair(&t, &p[i]);
    conn_table_destroy(&t);
}

/* Many addresses come and go: every group is freed with its last
 * connection, and the table's destructor frees what is left. */
static void test_groups_come_and_go(void **state)
{
    (void)state;
    struct conn_table t;
    assert_int_equal(conn_table_init(&t, 2000), 0);
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    struct conn_entry *e[1000];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 1000; i++) {
            struct sockaddr_in a = {.sin_family = AF_INET,
                                    .sin_addr.s_addr = htonl(0x0a000000u + (unsigned)(i % 500))};
            e[i] = conn_table_add(&t, fds[0], (struct sockaddr *)&a, i);
            assert_non_null(e[i]);
        }
        assert_int_equal(t.live, 1000);
        for (int i = 0; i < 1000; i += 2)
            conn_table_remove(&t, e[i]);
        assert_int_equal(t.live, 500);
        for (int i = 1; i < 1000; i += 2)
            conn_table_remove(&t, e[i]);
        assert_int_equal(t.live, 0);
        for (unsigned b = 0; b < t.nbuckets; b++)
            assert_null(t.buckets[b]);
    }
    (void)conn_table_add(&t, fds[0], NULL, 0); /* left for the destructor */
    conn_table_destroy(&t);
    close(fds[0]);
    close(fds[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_room_then_heaviest_address_oldest_idle),
        cmocka_unit_test(test_newcomer_takes_only_from_a_heavier_address),
        cmocka_unit_test(test_busy_connections_are_never_shed),
        cmocka_unit_test(test_v4_mapped_is_its_ipv4_address),
        cmocka_unit_test(test_request_deadline),
        cmocka_unit_test(test_groups_come_and_go),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests: node_state.c -- per-GPU and per-MIG health keyed by inventory
 * position: the change rule, counts and generations, lost GPUs, observers
 * in order (and in the order of concurrent changes), and a move. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "node_state.h"

/* 3 GPUs; GPU 1 has 2 MIG devices; GPU 2 was never identified (lost). */
struct world {
    struct gpu_inventory inv;
    struct node_state s;
};

static int setup(void **state)
{
    struct world *w = calloc(1, sizeof *w);
    fixture_inventory(&w->inv, 3, 0);
    fixture_mig(&w->inv, 1, 2, "3g.20gb");
    w->inv.gpus[2].lost = 1;
    char err[128];
    assert_int_equal(node_state_init(&w->s, &w->inv, err, sizeof err), 0);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    struct world *w = *state;
    node_state_free(&w->s);
    fixture_inventory_free(&w->inv);
    free(w);
    return 0;
}

static void test_start(void **state)
{
    struct world *w = *state;
    struct node_gpu_state g[3];
    node_state_gpus(&w->s, g, 3);
    assert_true(g[0].healthy && !g[0].lost);
    assert_true(g[1].healthy && !g[1].lost);
    assert_true(!g[2].healthy && g[2].lost); /* unidentified: lost, unhealthy */
    assert_true(node_state_healthy(&w->s, 1, 1));
    assert_false(node_state_healthy(&w->s, 2, NODE_STATE_WHOLE_GPU));
    assert_false(node_state_healthy(&w->s, 1, 2));  /* no such MIG device */
    assert_false(node_state_healthy(&w->s, 99, 0)); /* no such GPU */
    assert_int_equal(node_state_generation(&w->s), 1);
}

/* A MIG device's change reaches the GPU but not its sibling; the GPU's
 * reaches all of its MIG devices. */
static void test_change_rule(void **state)
{
    struct world *w = *state;
    assert_int_equal(node_state_set_mig_health(&w->s, 1, 0, false), 2); /* MIG 0 + the GPU */
    assert_false(node_state_healthy(&w->s, 1, 0));
    assert_true(node_state_healthy(&w->s, 1, 1));
    assert_false(node_state_healthy(&w->s, 1, NODE_STATE_WHOLE_GPU));
    assert_true(node_state_healthy(&w->s, 0, NODE_STATE_WHOLE_GPU));
    struct node_gpu_state g[3];
    node_state_gpus(&w->s, g, 3);
    assert_false(g[1].healthy);
    assert_int_equal(node_state_generation(&w->s), 2);

    assert_int_equal(node_state_set_mig_health(&w->s, 1, 0, false), 0); /* no change */
    assert_int_equal(node_state_generation(&w->s), 2);
    assert_int_equal(node_state_set_gpu_health(&w->s, 1, true), 2); /* the GPU and MIG 0 */
    assert_true(node_state_healthy(&w->s, 1, 0));
    assert_int_equal(node_state_set_gpu_health(&w->s, 1, false), 3); /* the GPU and both MIGs */
    assert_int_equal(node_state_set_all_health(&w->s, true), 4);     /* GPU 1 + 2 MIGs, GPU 2 */
    assert_int_equal(node_state_generation(&w->s), 5);

    /* Out of range: nothing. */
    assert_int_equal(node_state_set_gpu_health(&w->s, 3, false), 0);
    assert_int_equal(node_state_set_mig_health(&w->s, 0, 0, false), 0); /* GPU 0 has no MIG */
    assert_int_equal(node_state_set_mig_health(&w->s, 1, -2, false), 0);
    assert_int_equal(node_state_generation(&w->s), 5);
}

static void test_lost_stays_and_is_never_healthy(void **state)
{
    struct world *w = *state;
    node_state_set_gpu_lost(&w->s, 0);
    node_state_set_gpu_lost(&w->s, 42); /* outside: ignored */
    assert_true(node_state_gpu_lost(&w->s, 0));
    assert_false(node_state_gpu_lost(&w->s, 1));
    assert_false(node_state_gpu_lost(&w->s, 42));
    assert_true(node_state_healthy(&w->s, 0, NODE_STATE_WHOLE_GPU)); /* health is separate */
    assert_int_equal(node_state_set_all_health(&w->s, true), 1);     /* GPU 2's record */
    struct node_gpu_state g[3];
    node_state_gpus(&w->s, g, 3);
    assert_true(g[0].lost && !g[0].healthy);
    assert_true(g[2].lost && !g[2].healthy);
}

struct recorder {
    char order[32];
    struct node_state_change last;
};

struct observer {
    struct recorder *r;
    char letter;
    struct node_state *s;
};

static void on_change(void *ctx, const struct node_state_change *c)
{
    struct observer *o = ctx;
    size_t n = strlen(o->r->order);
    if (n + 1 < sizeof o->r->order)
        o->r->order[n] = o->letter;
    o->r->last = *c;
    /* Readers work from an observer and already see the change. */
    assert_int_equal(node_state_generation(o->s), c->generation);
    if (c->gpu != NODE_STATE_ALL_GPUS)
        assert_int_equal(node_state_healthy(o->s, c->gpu, c->mig), c->healthy);
}

static void test_observers_in_order(void **state)
{
    struct world *w = *state;
    struct recorder r = {0};
    struct observer a = {&r, 'a', &w->s}, b = {&r, 'b', &w->s};
    assert_int_equal(node_state_add_observer(&w->s, &a, on_change), 0);
    assert_int_equal(node_state_add_observer(&w->s, &b, on_change), 0);
    assert_int_equal(node_state_set_mig_health(&w->s, 1, 1, false), 2);
    assert_string_equal(r.order, "ab");
    assert_int_equal(r.last.gpu, 1);
    assert_int_equal(r.last.mig, 1);
    assert_false(r.last.healthy);
    assert_int_equal(r.last.changed, 2);
    assert_int_equal(r.last.generation, 2);
    assert_int_equal(node_state_set_mig_health(&w->s, 1, 1, false), 0); /* no change, no call */
    assert_string_equal(r.order, "ab");

    node_state_remove_observer(&w->s, &a, on_change);
    node_state_remove_observer(&w->s, &a, on_change); /* not registered: no-op */
    assert_int_equal(node_state_set_all_health(&w->s, true), 3);
    assert_string_equal(r.order, "abb");
    assert_int_equal(r.last.gpu, NODE_STATE_ALL_GPUS);

    struct observer more[NODE_STATE_MAX_OBSERVERS];
    size_t added = 0;
    for (size_t i = 0; i < NODE_STATE_MAX_OBSERVERS; i++)
        if (node_state_add_observer(&w->s, &more[i], on_change) == 0)
            added++;
    assert_int_equal(added, NODE_STATE_MAX_OBSERVERS - 1);
}

/* Two threads flip GPU 0 in opposite directions: every notification an
 * observer gets is the next generation, so the last one it heard matches
 * the state it can read afterwards. */
struct flipper {
    struct node_state *s;
    bool healthy;
};

static void *flip(void *arg)
{
    struct flipper *f = arg;
    for (int i = 0; i < 2000; i++)
        (void)node_state_set_gpu_health(f->s, 0, f->healthy);
    return NULL;
}

struct sequence {
    uint64_t last;
    bool healthy;
    int out_of_order;
};

static void on_sequence(void *ctx, const struct node_state_change *c)
{
    struct sequence *q = ctx;
    if (c->generation != q->last + 1)
        q->out_of_order++;
    q->last = c->generation;
    q->healthy = c->healthy;
}

static void test_changes_told_in_order(void **state)
{
    struct world *w = *state;
    struct sequence q = {.last = 1, .healthy = true};
    assert_int_equal(node_state_add_observer(&w->s, &q, on_sequence), 0);
    struct flipper up = {&w->s, true}, down = {&w->s, false};
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, flip, &up), 0);
    assert_int_equal(pthread_create(&t2, NULL, flip, &down), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(q.out_of_order, 0);
    assert_int_equal(q.last, node_state_generation(&w->s));
    assert_int_equal(q.healthy, node_state_healthy(&w->s, 0, NODE_STATE_WHOLE_GPU));
}

static void test_move(void **state)
{
    struct world *w = *state;
    assert_int_equal(node_state_set_gpu_health(&w->s, 0, false), 1);
    struct recorder r = {0};
    struct observer a = {&r, 'a', NULL};
    assert_int_equal(node_state_add_observer(&w->s, &a, on_change), 0);
    struct node_state to;
    node_state_move(&to, &w->s);
    assert_false(node_state_healthy(&to, 0, NODE_STATE_WHOLE_GPU));
    assert_int_equal(node_state_generation(&to), 2);
    assert_int_equal(node_state_set_gpu_health(&to, 0, true), 1);
    assert_string_equal(r.order, ""); /* observers are not carried */
    node_state_free(&to);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_change_rule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_stays_and_is_never_healthy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_observers_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changes_told_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_move, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

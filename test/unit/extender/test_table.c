/* Unit tests: the open-addressing table (table.c) -- lookups across long
 * probe runs, removal by backward shift, and a sweep that removes entries
 * as it goes visiting each exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "table.h"

#define COUNT 3000

struct item {
    struct table_entry entry;
    char key[24];
    int visits;
};

static struct item items[COUNT];

static void fill(struct table *t)
{
    for (int i = 0; i < COUNT; i++) {
        snprintf(items[i].key, sizeof(items[i].key), "node-%d", i);
        items[i].entry.key = items[i].key;
        items[i].visits = 0;
        assert_int_equal(table_insert(t, &items[i].entry), 0);
    }
    assert_int_equal(t->count, COUNT);
}

static void check_present(const struct table *t, int i, bool present)
{
    struct table_entry *e = table_find(t, items[i].key);
    if (present)
        assert_ptr_equal(e, &items[i].entry);
    else
        assert_null(e);
}

static void test_find_and_remove(void **state)
{
    (void)state;
    struct table t = TABLE_INIT;
    assert_null(table_find(&t, "node-1"));
    fill(&t);
    assert_null(table_find(&t, "node-x"));
    /* Remove every third entry: the rest must stay reachable however the
     * runs were shifted back. */
    for (int i = 0; i < COUNT; i += 3)
        table_remove(&t, &items[i].entry);
    table_remove(&t, &items[0].entry); /* not there any more: a no-op */
    assert_int_equal(t.count, COUNT - (COUNT + 2) / 3);
    for (int i = 0; i < COUNT; i++)
        check_present(&t, i, i % 3 != 0);
    size_t seen = 0, slot;
    for (struct table_entry *e = table_first(&t, &slot); e; e = table_next(&t, &slot, e))
        seen++;
    assert_int_equal(seen, t.count);
    table_free(&t);
}

/* A small table filled to its limit (load 3/4) has long probe runs, some
 * crossing the end of the slot array; removing from the back checks every
 * key after each shift. */
static void test_small_dense(void **state)
{
    (void)state;
    struct table t = TABLE_INIT;
    for (int i = 0; i < 48; i++) { /* 48 of 64 slots: load 3/4, long runs */
        snprintf(items[i].key, sizeof(items[i].key), "n%d", i);
        items[i].entry.key = items[i].key;
        assert_int_equal(table_insert(&t, &items[i].entry), 0);
    }
    assert_int_equal(t.size, 64);
    for (int i = 47; i >= 0; i -= 2) {
        table_remove(&t, &items[i].entry);
        for (int j = 0; j < 48; j++)
            check_present(&t, j, !(j % 2 == 1 && j >= i));
    }
    table_free(&t);
}

struct sweep_ctx {
    struct table *t;
};

static void sweep_visit(struct table_entry *e, void *ctx)
{
    struct sweep_ctx *s = ctx;
    struct item *it = table_container(e, struct item, entry);
    it->visits++;
    if ((it - items) % 2 == 0)
        table_remove(s->t, e);
}

static void test_sweep_removing(void **state)
{
    (void)state;
    struct table t = TABLE_INIT;
    fill(&t);
    struct sweep_ctx ctx = {&t};
    table_sweep(&t, sweep_visit, &ctx);
    for (int i = 0; i < COUNT; i++) {
        assert_int_equal(items[i].visits, 1);
        check_present(&t, i, i % 2 != 0);
    }
    assert_int_equal(t.count, COUNT / 2);
    table_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_and_remove),
        cmocka_unit_test(test_small_dense),
        cmocka_unit_test(test_sweep_removing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

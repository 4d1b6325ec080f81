/* Unit tests: container_edits.c -- the protocol-neutral edits: order kept,
 * a variable replaced in place, a device node listed once, merge across
 * arenas, lookups, and growth past the first capacity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "arena.h"
#include "container_edits.h"

static void test_env_set_replaces_in_place(void **state)
{
    (void)state;
    struct arena a = ARENA_INIT;
    struct container_edits e;
    container_edits_init(&e, &a);
    assert_true(container_edits_empty(&e));
    assert_int_equal(container_edits_set_env(&e, "A", "1"), 0);
    assert_int_equal(container_edits_set_env(&e, "B", "2"), 0);
    assert_int_equal(container_edits_set_env(&e, "A", "3"), 0);
    assert_int_equal(e.n_env, 2);
    assert_string_equal(e.env[0].key, "A"); /* first place kept */
    assert_string_equal(e.env[0].value, "3");
    assert_string_equal(container_edits_env(&e, "B"), "2");
    assert_null(container_edits_env(&e, "C"));
    assert_false(container_edits_empty(&e));
    arena_free(&a);
}

static void test_strings_are_copied(void **state)
{
    (void)state;
    struct arena a = ARENA_INIT;
    struct container_edits e;
    container_edits_init(&e, &a);
    char key[8] = "K", value[8] = "v", host[16] = "/h", path[16] = "/c";
    assert_int_equal(container_edits_set_env(&e, key, value), 0);
    assert_int_equal(container_edits_add_mount(&e, host, path, true), 0);
    key[0] = value[0] = host[1] = path[1] = 'x';
    assert_string_equal(container_edits_env(&e, "K"), "v");
    const struct container_mount *m = container_edits_mount(&e, "/c");
    assert_non_null(m);
    assert_string_equal(m->host_path, "/h");
    assert_true(m->read_only);
    assert_null(container_edits_mount(&e, "/x"));
    arena_free(&a);
}

static void test_device_node_listed_once(void **state)
{
    (void)state;
    struct arena a = ARENA_INIT;
    struct container_edits e;
    container_edits_init(&e, &a);
    assert_int_equal(container_edits_add_device_node(&e, "/dev/nvidia0", "/r/dev/nvidia0", "rw"),
                     0);
    assert_int_equal(container_edits_add_device_node(&e, "/dev/nvidiactl", "/dev/nvidiactl", NULL),
                     0);
    assert_int_equal(container_edits_add_device_node(&e, "/dev/nvidia0", "/other", NULL), 0);
    assert_int_equal(e.n_device_nodes, 2);
    const struct container_device_node *d = container_edits_device_node(&e, "/dev/nvidia0");
    assert_non_null(d);
    assert_string_equal(d->host_path, "/r/dev/nvidia0"); /* the first kept */
    assert_string_equal(d->permissions, "rw");
    assert_null(container_edits_device_node(&e, "/dev/nvidiactl")->permissions);
    arena_free(&a);
}

/* Many entries of every kind: each list grows past its first block and
 * reads back whole and in order. */
static void test_growth_keeps_order(void **state)
{
    (void)state;
    struct arena a = ARENA_INIT;
    struct container_edits e;
    container_edits_init(&e, &a);
    enum { N = 100 };
    for (int i = 0; i < N; i++) {
        char k[32], p[32];
        snprintf(k, sizeof k, "K%d", i);
        snprintf(p, sizeof p, "/p%d", i);
        const char *args[2] = {k, p};
        assert_int_equal(container_edits_set_env(&e, k, p), 0);
        assert_int_equal(container_edits_add_mount(&e, p, p, i % 2), 0);
        assert_int_equal(container_edits_add_device_node(&e, p, p, NULL), 0);
        assert_int_equal(container_edits_add_cdi_device(&e, k), 0);
        assert_int_equal(container_edits_add_hook(&e, "createContainer", p, args, 2), 0);
    }
    assert_int_equal(e.n_env, N);
    assert_int_equal(e.n_mounts, N);
    assert_int_equal(e.n_device_nodes, N);
    assert_int_equal(e.n_cdi_devices, N);
    assert_int_equal(e.n_hooks, N);
    for (int i = 0; i < N; i++) {
        char k[32], p[32];
        snprintf(k, sizeof k, "K%d", i);
        snprintf(p, sizeof p, "/p%d", i);
        assert_string_equal(e.env[i].key, k);
        assert_string_equal(e.mounts[i].container_path, p);
        assert_int_equal(e.mounts[i].read_only, i % 2);
        assert_string_equal(e.device_nodes[i].path, p);
        assert_string_equal(e.cdi_devices[i], k);
        assert_string_equal(e.hooks[i].path, p);
        assert_int_equal(e.hooks[i].n_args, 2);
        assert_string_equal(e.hooks[i].args[0], k);
        assert_string_equal(e.hooks[i].args[1], p);
    }
    assert_true(container_edits_has_cdi_device(&e, "K42"));
    assert_false(container_edits_has_cdi_device(&e, "K100"));
    arena_free(&a);
}

/* Merging edits built in another arena: everything copied (the source
 * arena can go), variables replaced, device nodes not repeated. */
static void test_merge_copies_across_arenas(void **state)
{
    (void)state;
    struct arena a = ARENA_INIT, b = ARENA_INIT;
    struct container_edits into, from;
    container_edits_init(&into, &a);
    container_edits_init(&from, &b);
    assert_int_equal(container_edits_set_env(&into, "X", "old"), 0);
    assert_int_equal(container_edits_add_device_node(&into, "/dev/nvidiactl", "/h/ctl", NULL), 0);
    const char *args[1] = {"--flag"};
    assert_int_equal(container_edits_set_env(&from, "X", "new"), 0);
    assert_int_equal(container_edits_set_env(&from, "Y", "y"), 0);
    assert_int_equal(container_edits_add_device_node(&from, "/dev/nvidiactl", "/other", NULL), 0);
    assert_int_equal(container_edits_add_device_node(&from, "/dev/nvidia1", "/h/1", NULL), 0);
    assert_int_equal(container_edits_add_mount(&from, "/lib.so", "/usr/lib.so", true), 0);
    assert_int_equal(container_edits_add_cdi_device(&from, "v/c=1"), 0);
    assert_int_equal(container_edits_add_hook(&from, "createContainer", "/bin/h", args, 1), 0);
    assert_int_equal(container_edits_merge(&into, &from), 0);
    arena_free(&b);
    assert_int_equal(into.n_env, 2);
    assert_string_equal(container_edits_env(&into, "X"), "new");
    assert_string_equal(container_edits_env(&into, "Y"), "y");
    assert_int_equal(into.n_device_nodes, 2);
    assert_string_equal(container_edits_device_node(&into, "/dev/nvidiactl")->host_path, "/h/ctl");
    assert_string_equal(container_edits_mount(&into, "/usr/lib.so")->host_path, "/lib.so");
    assert_string_equal(into.cdi_devices[0], "v/c=1");
    assert_string_equal(into.hooks[0].args[0], "--flag");
    arena_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_set_replaces_in_place),
        cmocka_unit_test(test_strings_are_copied),
        cmocka_unit_test(test_device_node_listed_once),
        cmocka_unit_test(test_growth_keeps_order),
        cmocka_unit_test(test_merge_copies_across_arenas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

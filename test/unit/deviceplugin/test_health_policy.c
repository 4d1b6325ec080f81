/* Unit tests: which XIDs make a device Unhealthy (health.c policy). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "health.h"

static void test_defaults(void **state)
{
    (void)state;
    struct health_policy p;
    health_policy_init(&p, NULL, NULL);
    assert_false(p.disabled);
    unsigned long long ignored[] = {13, 31, 43, 45, 68, 109};
    for (size_t i = 0; i < 6; i++)
        assert_false(health_xid_is_critical(&p, ignored[i]));
    unsigned long long critical[] = {48, 63, 64, 74, 79, 94, 95, 999};
    for (size_t i = 0; i < 8; i++)
        assert_true(health_xid_is_critical(&p, critical[i]));
}

static void test_disable_list_and_all(void **state)
{
    (void)state;
    struct health_policy p;
    health_policy_init(&p, " 48, 94 ,junk,-3,", NULL);
    assert_false(p.disabled);
    assert_false(health_xid_is_critical(&p, 48));
    assert_false(health_xid_is_critical(&p, 94));
    assert_true(health_xid_is_critical(&p, 79));
    assert_false(health_xid_is_critical(&p, 13));

    health_policy_init(&p, "ALL", NULL);
    assert_true(p.disabled);
    health_policy_init(&p, "xids", NULL);
    assert_true(p.disabled);
}

static void test_enable_overrides(void **state)
{
    (void)state;
    struct health_policy p;
    health_policy_init(&p, "48", "13,48");
    assert_true(health_xid_is_critical(&p, 13));
    assert_true(health_xid_is_critical(&p, 48));
    assert_false(health_xid_is_critical(&p, 31));
    health_policy_init(&p, NULL, "all");
    assert_true(health_xid_is_critical(&p, 31));
    assert_true(health_xid_is_critical(&p, 109));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_disable_list_and_all),
        cmocka_unit_test(test_enable_overrides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

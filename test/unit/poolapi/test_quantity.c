/* Kubernetes quantities as Go's Quantity.Value() reads them: whole numbers,
 * rounded up (the contract's parser, poolapi_quantity.h, at scale 1 and
 * bounded to int64 as kubectl-gpupool reads it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "poolapi_quantity.h"

static int quantity_parse(const char *text, int64_t *out)
{
    uint64_t v;
    if (poolapi_quantity_parse(text, 1, &v, NULL, 0) != 0 || v > INT64_MAX)
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int64_t q(const char *text)
{
    int64_t v = -42;
    assert_int_equal(quantity_parse(text, &v), 0);
    return v;
}

static void test_plain_and_suffixes(void **state)
{
    (void)state;
    assert_int_equal(q("16"), 16);
    assert_int_equal(q("+3"), 3);
    assert_int_equal(q("0"), 0);
    assert_int_equal(q("007"), 7);
    assert_int_equal(q("1Ki"), 1024);
    assert_int_equal(q("2Gi"), 2147483648LL);
    assert_int_equal(q("1Ei"), 1152921504606846976LL);
    assert_int_equal(q("3k"), 3000);
    assert_int_equal(q("5M"), 5000000);
    assert_int_equal(q("2e3"), 2000);
    assert_int_equal(q("2E2"), 200);
    assert_int_equal(q("1.5Gi"), 1610612736LL);
    assert_int_equal(q("1.5"), 2); /* rounded up, like Value() */
    assert_int_equal(q("500m"), 1);
    assert_int_equal(q("1000m"), 1);
    assert_int_equal(q("1001m"), 2);
    assert_int_equal(q("1n"), 1);
    assert_int_equal(q("0.000"), 0);
    assert_int_equal(q("0.001k"), 1);
    assert_int_equal(q("1e-3"), 1);
    assert_int_equal(q("9223372036854775807"), INT64_MAX);
}

static void test_rejected(void **state)
{
    (void)state;
    const char *bad[] = {"",
                         "-1",
                         "abc",
                         "1Q",
                         "1.2.3",
                         "1 Gi",
                         " 1",
                         "1Gi ",
                         ".",
                         "+",
                         "9223372036854775808",
                         "8Ei",
                         "1e19999",
                         "10000000000000000000000",
                         "1e",
                         "1e+",
                         "Gi"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 7;
        if (quantity_parse(bad[i], &v) != -1)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_int_equal(v, 7);
    }
    int64_t v;
    assert_int_equal(quantity_parse(NULL, &v), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_suffixes),
        cmocka_unit_test(test_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

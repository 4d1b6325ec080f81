/* Unit tests: the Prometheus text writer (prom.h) -- headers, label value
 * escaping, samples and a histogram's lines, byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "prom.h"

static void expect_text(struct buf *b, const char *want)
{
    char *text = buf_take(b, NULL);
    assert_non_null(text);
    assert_string_equal(text, want);
    free(text);
}

static void test_prom_header_and_gauge(void **state)
{
    (void)state;
    struct buf b = {0};
    prom_header(&b, "x_total", "counter", "Things.");
    prom_gauge(&b, "y", "Why.", 0.1);
    prom_sample_u64(&b, "z", NULL, 18446744073709551615ULL);
    prom_sample_double(&b, "w", "a=\"1\"", 2);
    expect_text(&b, "# HELP x_total Things.\n# TYPE x_total counter\n"
                    "# HELP y Why.\n# TYPE y gauge\ny 0.10000000000000001\n"
                    "z 18446744073709551615\n"
                    "w{a=\"1\"} 2\n");
}

static void test_prom_label_value_escapes(void **state)
{
    (void)state;
    struct buf b = {0};
    prom_label_value(&b, "a\\b\"c\nd\te");
    expect_text(&b, "a\\\\b\\\"c\\nd\te");
}

static void test_prom_histogram_lines(void **state)
{
    (void)state;
    static const double bounds[] = {0.0001, 0.5, 10};
    static const uint64_t cumulative[] = {1, 3, 3};
    struct buf b = {0};
    prom_histogram(&b, "h_seconds", NULL, bounds, cumulative, 3, 4, 12.5);
    prom_histogram(&b, "r_seconds", "resource=\"gpu\"", bounds, cumulative, 1, 1, 0.000000001);
    expect_text(&b, "h_seconds_bucket{le=\"0.0001\"} 1\n"
                    "h_seconds_bucket{le=\"0.5\"} 3\n"
                    "h_seconds_bucket{le=\"10\"} 3\n"
                    "h_seconds_bucket{le=\"+Inf\"} 4\n"
                    "h_seconds_sum 12.500000000\n"
                    "h_seconds_count 4\n"
                    "r_seconds_bucket{resource=\"gpu\",le=\"0.0001\"} 1\n"
                    "r_seconds_bucket{resource=\"gpu\",le=\"+Inf\"} 1\n"
                    "r_seconds_sum{resource=\"gpu\"} 0.000000001\n"
                    "r_seconds_count{resource=\"gpu\"} 1\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prom_header_and_gauge),
        cmocka_unit_test(test_prom_label_value_escapes),
        cmocka_unit_test(test_prom_histogram_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

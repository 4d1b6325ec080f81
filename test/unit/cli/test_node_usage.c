/* A node agent's /metrics reduced to what `top` and /ui show: the text
 * reader's edge cases (escapes, timestamps, special values, bad lines) and
 * the sums per pod and per GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "node_usage.h"
#include "prom_text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct seen {
    int count;
    char name[64], label[64];
    double value;
};

static int remember(const struct prom_sample *s, void *ctx)
{
    struct seen *seen = ctx;
    seen->count++;
    snprintf(seen->name, sizeof seen->name, "%s", s->name);
    const char *v = prom_sample_label(s, "a");
    snprintf(seen->label, sizeof seen->label, "%s", v ? v : "(none)");
    seen->value = s->value;
    return 0;
}

static struct seen parse_one(const char *text, size_t *bad)
{
    struct seen seen = {0};
    assert_int_equal(prom_text_parse(text, strlen(text), remember, &seen, bad), 0);
    return seen;
}

static void test_sample_forms(void **state)
{
    (void)state;
    size_t bad;
    struct seen s = parse_one("m 1.5\n", &bad);
    assert_int_equal(s.count, 1);
    assert_string_equal(s.name, "m");
    assert_true(s.value == 1.5 && bad == 0);
    s = parse_one("m{a=\"x\\\\y\\\"z\\nw\",b=\"\"} 2e3 1700000000000\n", &bad);
    assert_string_equal(s.label, "x\\y\"z\nw");
    assert_true(s.value == 2000 && bad == 0);
    s = parse_one("m{ a = \"v\" , } +Inf\r\n", &bad); /* blanks, trailing comma, CRLF */
    assert_string_equal(s.label, "v");
    assert_true(isinf(s.value) && s.value > 0 && bad == 0);
    s = parse_one("m NaN", &bad); /* no newline at the end */
    assert_true(s.count == 1 && isnan(s.value));
    s = parse_one("# HELP m x\n# TYPE m gauge\n\n   \nm{a=\"1\"} -3\n", &bad);
    assert_true(s.count == 1 && s.value == -3 && bad == 0);
}

static void test_bad_lines_are_skipped(void **state)
{
    (void)state;
    size_t bad;
    const char *text = "m{a=\"x\" 1\n"     /* unclosed braces */
                       "m{a=x} 1\n"        /* unquoted value */
                       "m{a=\"x\\q\"} 1\n" /* unknown escape */
                       "m 1 2 3\n"         /* junk after the timestamp */
                       "m\n"               /* no value */
                       "9m 1\n"            /* a name starts with a digit */
                       "m{a=\"ok\"} 7\n";
    struct seen s = parse_one(text, &bad);
    assert_int_equal(s.count, 1);
    assert_true(s.value == 7 && bad == 6);
    /* A line over 64 KiB is one bad line, not a crash or a cut. */
    size_t n = 70 * 1024;
    char *big = malloc(n + 16);
    assert_non_null(big);
    memset(big, 'x', n);
    memcpy(big + n, " 1\nm 2\n", 8);
    struct seen b = {0};
    assert_int_equal(prom_text_parse(big, strlen(big), remember, &b, &bad), 0);
    assert_true(b.count == 1 && b.value == 2 && bad == 1);
    free(big);
}

static void test_sums_per_pod_and_gpu(void **state)
{
    (void)state;
    const char *text =
        "gpupool_container_gpu_memory_used_bytes{namespace=\"ns\",pod=\"p\",container=\"a\","
        "gpu_uuid=\"G0\"} 100\n"
        "gpupool_container_gpu_memory_used_bytes{namespace=\"ns\",pod=\"p\",container=\"b\","
        "gpu_uuid=\"G1\"} 50\n"
        "gpupool_container_gpu_memory_limit_bytes{namespace=\"ns\",pod=\"p\",container=\"a\","
        "gpu_uuid=\"G0\"} 400\n"
        "gpupool_process_gpu_sm_utilization_ratio{namespace=\"ns\",pod=\"p\",container=\"a\","
        "gpu_uuid=\"G0\",pid=\"1\"} 0.25\n"
        "gpupool_process_gpu_sm_utilization_ratio{namespace=\"ns\",pod=\"p\",container=\"a\","
        "gpu_uuid=\"G0\",pid=\"2\"} 0.5\n"
        "gpupool_process_gpu_memory_used_bytes{namespace=\"\",pod=\"\",container=\"\","
        "gpu_uuid=\"G0\",pid=\"3\"} 9\n" /* no pod: left out */
        "gpupool_container_gpu_memory_used_bytes{namespace=\"ns\",pod=\"q\"} NaN\n" /* no figure */
        "gpupool_gpu_healthy{gpu=\"1\",uuid=\"G1\",model=\"M\"} 1\n"
        "gpupool_gpu_memory_used_bytes{gpu_uuid=\"G1\"} 1000\n"
        "gpupool_gpu_sm_utilization_ratio{gpu_uuid=\"G1\"} 0.75\n"
        "gpupool_gpu_utilization_ratio{gpu=\"1\",uuid=\"G1\"} 0.1\n" /* the older name loses */
        "gpupool_gpu_memory_used_bytes{gpu_uuid=\"G9\"} 5\n";        /* no index anywhere */
    struct node_usage u = {0};
    assert_int_equal(node_usage_parse(&u, text, strlen(text)), 0);
    assert_int_equal(u.state, USAGE_OK);
    const struct usage_pod *p = node_usage_pod(&u, "ns", "p");
    assert_non_null(p);
    assert_true(p->mem_used == 150 && p->mem_limit == 400 && p->sm == 0.75);
    assert_true((p->has & (USAGE_MEM_USED | USAGE_MEM_LIMIT | USAGE_SM)) ==
                (USAGE_MEM_USED | USAGE_MEM_LIMIT | USAGE_SM));
    assert_false(p->has & USAGE_PROC_MEM);
    const struct usage_pod *q = node_usage_pod(&u, "ns", "q");
    assert_true(q == NULL || q->has == 0);
    assert_null(node_usage_pod(&u, "", ""));
    const struct usage_gpu *g = node_usage_gpu(&u, 1);
    assert_non_null(g);
    assert_string_equal(g->uuid, "G1");
    assert_string_equal(g->model, "M");
    assert_true(g->mem_used == 1000 && g->sm == 0.75);
    assert_null(node_usage_gpu(&u, 9));
    node_usage_free(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_forms),
        cmocka_unit_test(test_bad_lines_are_skipped),
        cmocka_unit_test(test_sums_per_pod_and_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

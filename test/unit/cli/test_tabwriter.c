/* Go text/tabwriter alignment (padding 2, spaces): column blocks are runs of
 * consecutive lines reaching a column, trailing tab-ended cells are padded,
 * a line without tabs breaks every block. Expected strings were worked out
 * from Go's algorithm by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "tabwriter.h"

#include <string.h>

static char *format(const char *text)
{
    struct tabwriter tw;
    tabwriter_init(&tw, 2);
    tabwriter_write(&tw, text, strlen(text));
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(tabwriter_flush(&tw, out), 0);
    fclose(out);
    tabwriter_free(&tw);
    return buf;
}

static void expect(const char *in, const char *want)
{
    char *got = format(in);
    assert_string_equal(got, want);
    free(got);
}

static void test_basic_columns(void **state)
{
    (void)state;
    expect("a\tbb\tc\n"
           "aaaa\tb\tc\n",
           "a     bb  c\n"
           "aaaa  b   c\n");
}

static void test_trailing_cells_are_padded(void **state)
{
    (void)state;
    /* gpushare's cluster line: "%d/%d (%d%%)\t\n" ends in two spaces */
    expect("Allocated/Total GPU Memory In Cluster:\n9/30 (30%)\t\n",
           "Allocated/Total GPU Memory In Cluster:\n9/30 (30%)  \n");
}

static void test_blocks_break_on_lines_without_the_column(void **state)
{
    (void)state;
    expect("x\ty\n"
           "plain line\n"
           "longer\tz\n",
           "x  y\n"
           "plain line\n"
           "longer  z\n");
    /* column 1 block: only the lines with two tabs, consecutive */
    expect("a\tb\tc\n"
           "aa\tbbbbbb\n"
           "a\tb\tc\n",
           "a   b  c\n"
           "aa  bbbbbb\n"
           "a   b  c\n");
}

static void test_empty_cells_and_no_final_newline(void **state)
{
    (void)state;
    expect("\t\tx\nab\t\ty", "      x\nab    y");
    expect("", "");
    expect("\n\n", "\n\n");
}

static void test_utf8_width(void **state)
{
    (void)state;
    expect("é\tx\nab\tx\n", "é   x\nab  x\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_columns),
        cmocka_unit_test(test_trailing_cells_are_padded),
        cmocka_unit_test(test_blocks_break_on_lines_without_the_column),
        cmocka_unit_test(test_empty_cells_and_no_final_newline),
        cmocka_unit_test(test_utf8_width),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

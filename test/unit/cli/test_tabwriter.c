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

static void expect_safe(const char *in, const char *want)
{
    struct tabwriter tw;
    tabwriter_init(&tw, 2);
    const char *got = tabwriter_safe(&tw, in);
    assert_string_equal(got, want);
    if (strcmp(in, want) == 0)
        assert_ptr_equal(got, in); /* nothing to escape: no copy */
    tabwriter_free(&tw);
}

/* D10: API text cannot drive the terminal or add cells and lines. */
static void test_safe_escapes_control_characters(void **state)
{
    (void)state;
    expect_safe("T4 plain-text é 日本 \xf0\x9f\x98\x80", "T4 plain-text é 日本 \xf0\x9f\x98\x80");
    expect_safe("T4\x1b[2J\x1b]0;owned\x07", "T4\\x1b[2J\\x1b]0;owned\\x07");
    expect_safe("a\tb\nc\rd\x7f", "a\\x09b\\x0ac\\x0dd\\x7f");
    /* C1 controls: CSI (U+009B) as UTF-8 and as a lone byte */
    expect_safe("x\xc2\x9b"
                "2Jy",
                "x\\xc2\\x9b2Jy");
    expect_safe("x\x9b"
                "2J",
                "x\\x9b2J");
    /* not UTF-8: overlong, surrogate, past U+10FFFF, truncated */
    expect_safe("\xc0\x9b", "\\xc0\\x9b");
    expect_safe("\xed\xa0\x80", "\\xed\\xa0\\x80");
    expect_safe("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80");
    expect_safe("\xe6\x97", "\\xe6\\x97");
    expect_safe("", "");

    /* through a table: the escaped cell stays one cell on one line */
    struct tabwriter tw;
    tabwriter_init(&tw, 2);
    tabwriter_printf(&tw, "NAME\tMODEL\n");
    tabwriter_printf(&tw, "n1\t%s\n", tabwriter_safe(&tw, "T4\n\x1b[31mEVIL\tx"));
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(tabwriter_flush(&tw, out), 0);
    fclose(out);
    tabwriter_free(&tw);
    assert_string_equal(buf, "NAME  MODEL\n"
                             "n1    T4\\x0a\\x1b[31mEVIL\\x09x\n");
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_columns),
        cmocka_unit_test(test_trailing_cells_are_padded),
        cmocka_unit_test(test_blocks_break_on_lines_without_the_column),
        cmocka_unit_test(test_empty_cells_and_no_final_newline),
        cmocka_unit_test(test_utf8_width),
        cmocka_unit_test(test_safe_escapes_control_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

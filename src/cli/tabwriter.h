/* tabwriter.h -- column alignment that matches Go's text/tabwriter.
 *
 * gpushare's kubectl-inspect-gpushare prints through
 * tabwriter.NewWriter(out, 0, 0, 2, ' ', 0); scripts parse that output, so
 * kubectl-inspect-gpushare reproduces its alignment byte for byte, and the
 * gpupool tables use the same rules.
 *
 * The rules: text is cut into lines at '\n' and into cells at '\t'. A cell
 * ended by a tab belongs to a column; the text after a line's last tab does
 * not. A column block is a maximal run of consecutive lines that all have a
 * cell in that column; every cell of the block is padded with spaces to the
 * widest cell of the block (width in UTF-8 characters) plus `padding`.
 * Trailing cells are padded too, so a line ending in "\t\n" ends in spaces.
 *
 * Owner: the writer owns its text buffer; tabwriter_free() releases it.
 * Not thread-safe. */
#ifndef GP_CLI_TABWRITER_H
#define GP_CLI_TABWRITER_H

#include <stddef.h>
#include <stdio.h>

#include "buf.h"
#include "compiler.h"

struct tabwriter_escaped; /* tabwriter.c */

struct tabwriter {
    struct buf text; /* its failed flag: tabwriter_flush reports it */
    int padding;
    struct tabwriter_escaped *escaped; /* tabwriter_safe's copies; owned */
};

void tabwriter_init(struct tabwriter *tw, int padding);
void tabwriter_free(struct tabwriter *tw);

/* Appends formatted text (cells separated by '\t', lines by '\n'). An
 * allocation failure is remembered and reported by the flush. */
void tabwriter_printf(struct tabwriter *tw, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tabwriter_write(struct tabwriter *tw, const char *text, size_t len);

/* Text from outside (the API server: names, addresses, GPU models) made
 * safe to print into a table: every control character (C0 including tab
 * and newline, DEL, C1 as UTF-8) and every byte that is not valid UTF-8
 * is written as \xNN, so it can neither drive the terminal nor add cells
 * or lines. Returns `s` itself when nothing needs escaping, else a copy
 * the writer owns until the next flush or free ("?" when out of memory,
 * which also fails the flush). NULL stays NULL. */
const char *tabwriter_safe(struct tabwriter *tw, const char *s);

/* Aligns everything appended so far, writes it to out and empties the
 * writer. Returns 0, or -1 when out of memory or the write failed. */
int tabwriter_flush(struct tabwriter *tw, FILE *out) GP_MUST_USE;

#endif

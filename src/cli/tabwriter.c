/* tabwriter.c -- Go text/tabwriter alignment (see tabwriter.h).
 *
 * Go's writer finds column blocks recursively, column by column inside the
 * block of the column to its left. A line with a cell in column c also has
 * one in every column left of c, so that recursion is the same as taking,
 * for each column on its own, the maximal runs of lines that reach it. That
 * is what flush does, in two passes over a table of cell offsets. */
#include "tabwriter.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

struct cell {
    size_t start, len;
    size_t width;        /* UTF-8 characters */
    size_t column_width; /* padded width of its column block; 0 for a line's last cell */
};

struct line {
    size_t first;  /* index of its first cell in the cell table */
    size_t ncells; /* including the last, untabbed one */
};

/* One escaped copy (tabwriter_safe), in a list freed at flush. */
struct tabwriter_escaped {
    struct tabwriter_escaped *next;
    char text[];
};

static void free_escaped(struct tabwriter *tw)
{
    while (tw->escaped) {
        struct tabwriter_escaped *next = tw->escaped->next;
        free(tw->escaped);
        tw->escaped = next;
    }
}

void tabwriter_init(struct tabwriter *tw, int padding)
{
    memset(tw, 0, sizeof *tw);
    tw->padding = padding;
}

void tabwriter_free(struct tabwriter *tw)
{
    buf_free(&tw->text);
    free_escaped(tw);
    memset(tw, 0, sizeof *tw);
}

void tabwriter_write(struct tabwriter *tw, const char *text, size_t len)
{
    /* A failure stays in the buf (sticky); the flush reports it. */
    (void)buf_add(&tw->text, text, len);
}

void tabwriter_printf(struct tabwriter *tw, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (!buf_vprintf(&tw->text, fmt, ap))
        tw->text.failed = true; /* a format error, too, fails the flush */
    va_end(ap);
}

/* Length of the valid, printable UTF-8 sequence at s (RFC 3629: no
 * overlong forms, surrogates or code points past U+10FFFF); 0 when the
 * byte there must be escaped: C0, DEL, C1 (U+0080..U+009F, which
 * terminals take as CSI, OSC, ...) and anything not valid UTF-8. */
static size_t printable_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c >= 0x20 && c < 0x7f)
        return 1;
    size_t n = c >= 0xc2 && c <= 0xdf   ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    if (n == 0)
        return 0;
    unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c == 0xc2)
        lo = 0xa0; /* U+0080..U+009F are the C1 controls */
    else if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

const char *tabwriter_safe(struct tabwriter *tw, const char *s)
{
    if (s == NULL)
        return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t bad = 0, len = 0;
    while (u[len]) {
        size_t n = printable_len(u + len);
        bad += n == 0;
        len += n ? n : 1;
    }
    if (bad == 0)
        return s;
    struct tabwriter_escaped *e = malloc(sizeof *e + len + 3 * bad + 1);
    if (e == NULL) {
        tw->text.failed = true;
        return "?";
    }
    char *out = e->text;
    for (size_t i = 0; i < len;) {
        size_t n = printable_len(u + i);
        if (n == 0) {
            static const char hex[] = "0123456789abcdef";
            *out++ = '\\';
            *out++ = 'x';
            *out++ = hex[u[i] >> 4];
            *out++ = hex[u[i] & 0xf];
            i++;
        } else {
            memcpy(out, u + i, n);
            out += n;
            i += n;
        }
    }
    *out = '\0';
    e->next = tw->escaped;
    tw->escaped = e;
    return e->text;
}

static size_t utf8_width(const char *s, size_t len)
{
    size_t w = 0;
    for (size_t i = 0; i < len; i++)
        w += ((unsigned char)s[i] & 0xC0) != 0x80;
    return w;
}

/* Cuts the text into lines and cells. The text after the last '\n' is a
 * final line written without a newline (empty when the text ends in one). */
static int split(const struct tabwriter *tw, struct line **lines_out, size_t *nlines_out,
                 struct cell **cells_out)
{
    size_t nlines = 1, ncells = 1;
    for (size_t i = 0; i < tw->text.len; i++) {
        nlines += tw->text.data[i] == '\n';
        ncells += tw->text.data[i] == '\n' || tw->text.data[i] == '\t';
    }
    struct line *lines = calloc(nlines, sizeof *lines);
    struct cell *cells = calloc(ncells, sizeof *cells);
    if (!lines || !cells) {
        free(lines);
        free(cells);
        return -1;
    }
    size_t l = 0, c = 0, start = 0;
    lines[0].first = 0;
    for (size_t i = 0; i <= tw->text.len; i++) {
        char ch = i < tw->text.len ? tw->text.data[i] : '\n';
        if (ch != '\t' && ch != '\n')
            continue;
        cells[c] = (struct cell){start, i - start, utf8_width(tw->text.data + start, i - start), 0};
        c++;
        lines[l].ncells++;
        start = i + 1;
        if (ch == '\n' && i < tw->text.len) {
            lines[++l].first = c;
        }
    }
    *lines_out = lines;
    *nlines_out = nlines;
    *cells_out = cells;
    return 0;
}

/* Column widths: for each column, each maximal run of lines that have a
 * tab-ended cell there is padded to its widest cell. */
static void measure(struct line *lines, size_t nlines, struct cell *cells, int padding)
{
    for (size_t column = 0;; column++) {
        bool any = false;
        size_t l = 0;
        while (l < nlines) {
            if (lines[l].ncells - 1 <= column) {
                l++;
                continue;
            }
            any = true;
            size_t run_end = l, width = 0;
            for (; run_end < nlines && lines[run_end].ncells - 1 > column; run_end++) {
                size_t w = cells[lines[run_end].first + column].width + (size_t)padding;
                if (w > width)
                    width = w;
            }
            for (; l < run_end; l++)
                cells[lines[l].first + column].column_width = width;
        }
        if (!any)
            return;
    }
}

static int emit(const struct tabwriter *tw, const struct line *lines, size_t nlines,
                const struct cell *cells, FILE *out)
{
    for (size_t l = 0; l < nlines; l++) {
        for (size_t j = 0; j < lines[l].ncells; j++) {
            const struct cell *c = &cells[lines[l].first + j];
            if (fwrite(tw->text.data + c->start, 1, c->len, out) != c->len)
                return -1;
            bool last = j + 1 == lines[l].ncells;
            for (size_t pad = c->width; !last && pad < c->column_width; pad++)
                if (putc(' ', out) == EOF)
                    return -1;
        }
        if (l + 1 < nlines && putc('\n', out) == EOF)
            return -1;
    }
    return 0;
}

int tabwriter_flush(struct tabwriter *tw, FILE *out)
{
    int rc = -1;
    struct line *lines = NULL;
    struct cell *cells = NULL;
    size_t nlines = 0;
    if (!tw->text.failed && split(tw, &lines, &nlines, &cells) == 0) {
        measure(lines, nlines, cells, tw->padding);
        rc = emit(tw, lines, nlines, cells, out);
    }
    free(lines);
    free(cells);
    free_escaped(tw);
    tw->text.len = 0;
    tw->text.failed = false;
    if (tw->text.data)
        tw->text.data[0] = '\0';
    return rc;
}

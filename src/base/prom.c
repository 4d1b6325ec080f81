/* prom.c -- Prometheus text exposition writer (see prom.h). */
#include "prom.h"

#include "build_info.h"

#include <string.h>

void prom_header(struct buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_label_value(struct buf *b, const char *value)
{
    /* Runs of plain characters in one append: scrapes write thousands of
     * label values. */
    const char *run = value;
    for (const char *c = value;; c++) {
        if (*c != '\0' && *c != '\\' && *c != '"' && *c != '\n')
            continue;
        buf_add(b, run, (size_t)(c - run));
        if (*c == '\0')
            return;
        buf_add(b, *c == '\n' ? "\\n" : *c == '"' ? "\\\"" : "\\\\", 2);
        run = c + 1;
    }
}

static void open_labels(struct buf *b, const char *name, const char *labels)
{
    buf_str(b, name);
    if (labels && *labels) {
        buf_add(b, "{", 1);
        buf_str(b, labels);
        buf_add(b, "}", 1);
    }
}

void prom_sample_u64(struct buf *b, const char *name, const char *labels, uint64_t v)
{
    open_labels(b, name, labels);
    buf_add(b, " ", 1);
    buf_u64(b, v);
    buf_add(b, "\n", 1);
}

void prom_sample_double(struct buf *b, const char *name, const char *labels, double v)
{
    open_labels(b, name, labels);
    buf_printf(b, " %.17g\n", v);
}

void prom_gauge(struct buf *b, const char *name, const char *help, double value)
{
    prom_header(b, name, "gauge", help);
    prom_sample_double(b, name, NULL, value);
}

void prom_build_info(struct buf *b, const char *program)
{
    prom_header(b, "gpupool_build_info", "gauge",
                "Always 1; the labels say which program, version and commit this is.");
    buf_str(b, "gpupool_build_info{program=\"");
    prom_label_value(b, program);
    buf_str(b, "\",version=\"");
    prom_label_value(b, GP_VERSION);
    buf_str(b, "\",revision=\"");
    prom_label_value(b, gp_build_revision);
    buf_str(b, "\"} 1\n");
}

void prom_histogram(struct buf *b, const char *name, const char *labels, const double *bounds,
                    const uint64_t *cumulative, size_t n, uint64_t count, double sum)
{
    const char *sep = labels && *labels ? "," : "";
    if (!labels)
        labels = "";
    for (size_t i = 0; i < n; i++)
        buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[i],
                   (unsigned long long)cumulative[i]);
    buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
               (unsigned long long)count);
    buf_printf(b, "%s_sum%s%s%s %.9f\n", name, *labels ? "{" : "", labels, *labels ? "}" : "", sum);
    buf_printf(b, "%s_count%s%s%s %llu\n", name, *labels ? "{" : "", labels, *labels ? "}" : "",
               (unsigned long long)count);
}

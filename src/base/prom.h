/* prom.h -- the Prometheus text exposition format (0.0.4), written into a struct buf.
 *
 * The pieces both daemons' /metrics are made of: the HELP/TYPE header, a
 * label value escaped, one sample, a histogram's bucket/sum/count lines.
 * Callers keep their own counters and their own label sets; this only
 * decides how the text looks, so the two endpoints cannot drift apart.
 *
 * Numbers: integer samples print in decimal, gauges with %.17g (exact
 * round trip), bucket bounds with %g, histogram sums with %.9f.
 * Errors: none returned: out of memory is sticky in the struct buf
 * (buf_take() then answers NULL). Threads: the caller's buf, the caller's
 * thread. */
#ifndef GP_PROM_H
#define GP_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* "# HELP name help\n# TYPE name type\n" (type: counter, gauge, histogram). */
void prom_header(struct buf *b, const char *name, const char *type, const char *help);

/* A label value's text: backslash, double quote and newline escaped. */
void prom_label_value(struct buf *b, const char *value);

/* One gauge with no labels, header included: "name %.17g\n". */
void prom_gauge(struct buf *b, const char *name, const char *help, double value);

/* "name{labels} v\n" (labels: the text between the braces, values already
 * escaped; NULL or "" = no braces). */
void prom_sample_u64(struct buf *b, const char *name, const char *labels, uint64_t v);
void prom_sample_double(struct buf *b, const char *name, const char *labels, double v);

/* gpupool_build_info{program,version,revision} 1, header included: the
 * version and the git commit the binary was built from (GP_VERSION and
 * GP_REVISION, "unknown" when the tree was no git checkout), so a
 * dashboard can tell which build each daemon runs. */
void prom_build_info(struct buf *b, const char *program);

/* A histogram's samples (no header): name_bucket{labels,le="%g"} for each
 * of the n finite bounds with cumulative[i] (already summed and, if the
 * caller wants, clamped), le="+Inf" with count, name_sum{labels} %.9f and
 * name_count{labels}. */
void prom_histogram(struct buf *b, const char *name, const char *labels, const double *bounds,
                    const uint64_t *cumulative, size_t n, uint64_t count, double sum);

#endif

/* prom_text.h -- a reader of the Prometheus text exposition format (0.0.4).
 *
 * `kubectl gpupool top` reads the node agents' /metrics by series name;
 * this walks the text and hands each sample line to a callback:
 *
 *   name{label="value",...} 1.5e9 [timestamp]
 *
 * Comments (# HELP, # TYPE) and blank lines are skipped; a line that does
 * not parse is skipped too (counted in *bad), so one odd line from a newer
 * agent costs that line, not the node. Label values are unescaped (\\, \",
 * \n). Values: floats, +Inf, -Inf, NaN. No allocation: names and labels
 * point into a scratch copy of the line, valid during the callback. */
#ifndef GP_CLI_PROM_TEXT_H
#define GP_CLI_PROM_TEXT_H

#include <stddef.h>

#define PROM_MAX_LABELS 16

struct prom_label {
    const char *name, *value;
};

struct prom_sample {
    const char *name;
    struct prom_label labels[PROM_MAX_LABELS];
    int nlabels;
    double value;
};

/* The value of label `name`, NULL when the sample has none. */
const char *prom_sample_label(const struct prom_sample *s, const char *name);

/* Calls on_sample for every sample of text[0..len). on_sample returns 0 to
 * go on, anything else to stop (returned). Lines longer than 64 KiB are
 * skipped as bad. Returns 0 after the last line. */
int prom_text_parse(const char *text, size_t len,
                    int (*on_sample)(const struct prom_sample *s, void *ctx), void *ctx,
                    size_t *bad);

#endif

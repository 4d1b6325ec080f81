/* prom_text.c -- Prometheus text exposition reader (prom_text.h). */
#include "prom_text.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PROM_MAX_LINE (64 * 1024)

const char *prom_sample_label(const struct prom_sample *s, const char *name)
{
    for (int i = 0; i < s->nlabels; i++)
        if (strcmp(s->labels[i].name, name) == 0)
            return s->labels[i].value;
    return NULL;
}

static bool name_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

/* Reads a name at *p, NUL-terminates it in place. NULL when none. */
static char *read_name(char **p)
{
    char *start = *p;
    if (!name_char(*start, true))
        return NULL;
    char *q = start + 1;
    while (name_char(*q, false))
        q++;
    *p = q;
    return start;
}

static void skip_blank(char **p)
{
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

/* Parses {a="x",b="y"} at *p (unescaping in place). false when malformed. */
static bool read_labels(char **p, struct prom_sample *s)
{
    char *q = *p; /* past '{' */
    for (;;) {
        skip_blank(&q);
        if (*q == '}') {
            *p = q + 1;
            return true;
        }
        char *name = read_name(&q);
        if (!name)
            return false;
        char *end_name = q;
        skip_blank(&q);
        if (*q != '=')
            return false;
        *end_name = '\0';
        q++;
        skip_blank(&q);
        if (*q != '"')
            return false;
        char *value = ++q, *w = q;
        for (; *q != '"'; q++) {
            if (*q == '\0')
                return false;
            if (*q == '\\') {
                q++;
                if (*q == 'n')
                    *w++ = '\n';
                else if (*q == '\\' || *q == '"')
                    *w++ = *q;
                else
                    return false;
            } else {
                *w++ = *q;
            }
        }
        q++; /* past the closing quote, which w may now overwrite */
        *w = '\0';
        if (s->nlabels == PROM_MAX_LABELS)
            return false;
        s->labels[s->nlabels].name = name;
        s->labels[s->nlabels].value = value;
        s->nlabels++;
        skip_blank(&q);
        if (*q == ',')
            q++;
        else if (*q != '}')
            return false;
    }
}

static bool read_value(char *p, double *out)
{
    skip_blank(&p);
    char *end;
    if (strncmp(p, "+Inf", 4) == 0) {
        *out = INFINITY;
        end = p + 4;
    } else if (strncmp(p, "-Inf", 4) == 0) {
        *out = -INFINITY;
        end = p + 4;
    } else if (strncmp(p, "NaN", 3) == 0) {
        *out = NAN;
        end = p + 3;
    } else {
        *out = strtod(p, &end);
        if (end == p)
            return false;
    }
    /* An optional timestamp (integer milliseconds), then the end. */
    skip_blank(&end);
    if (*end == '-')
        end++;
    while (*end >= '0' && *end <= '9')
        end++;
    skip_blank(&end);
    return *end == '\0' || *end == '\r';
}

static bool parse_line(char *line, struct prom_sample *s)
{
    char *p = line;
    skip_blank(&p);
    s->nlabels = 0;
    s->name = read_name(&p);
    if (!s->name)
        return false;
    char *end_name = p;
    skip_blank(&p);
    bool labels = *p == '{';
    if (!labels && p == end_name)
        return false; /* the name runs into something else */
    /* Terminating the name may overwrite the brace: read_labels starts
     * past it. */
    *end_name = '\0';
    if (labels) {
        p++;
        if (!read_labels(&p, s))
            return false;
    } else {
        p = end_name + 1;
    }
    return read_value(p, &s->value);
}

int prom_text_parse(const char *text, size_t len,
                    int (*on_sample)(const struct prom_sample *s, void *ctx), void *ctx,
                    size_t *bad)
{
    char *line = malloc(PROM_MAX_LINE + 1);
    size_t nbad = 0;
    int rc = 0;
    if (!line)
        return -1;
    for (size_t at = 0; at < len && rc == 0;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        const char *start = text + at;
        at += n + (nl != NULL);
        size_t lead = 0;
        while (lead < n && (start[lead] == ' ' || start[lead] == '\t'))
            lead++;
        if (lead == n || start[lead] == '#' || (n - lead == 1 && start[lead] == '\r'))
            continue;
        struct prom_sample sample;
        if (n > PROM_MAX_LINE || memchr(start, '\0', n)) {
            nbad++;
            continue;
        }
        memcpy(line, start, n);
        line[n] = '\0';
        if (!parse_line(line, &sample)) {
            nbad++;
            continue;
        }
        rc = on_sample(&sample, ctx);
    }
    free(line);
    if (bad)
        *bad = nbad;
    return rc;
}

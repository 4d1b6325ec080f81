/* quantity.h -- Kubernetes resource quantities ("16", "1Gi", "500m", "2e3").
 *
 * Node capacities and container limits arrive as quantity strings. The
 * inspect commands need what Go's resource.Quantity.Value() returns: the
 * value as a whole number, rounded up. Pure functions, no allocation. */
#ifndef GP_CLI_QUANTITY_H
#define GP_CLI_QUANTITY_H

#include <stdint.h>

/* Parses a quantity (optional '+', digits with an optional fraction, then
 * one suffix: Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or e<exp>/E<exp>) into
 * *out, rounded up to a whole number. Returns 0, or -1 when the text is not
 * a quantity, is negative, or does not fit in int64 (*out untouched). */
int quantity_parse(const char *text, int64_t *out) __attribute__((warn_unused_result));

#endif

/* poolapi_quantity.h -- Kubernetes resource.Quantity ("500m", "1.5Gi", "1k", "2e3").
 *
 * The one quantity parser of every gpupool program: node capacities,
 * container requests/limits and pod overheads arrive as quantity strings
 * (or, written by hand, as bare JSON integers). Pure, no allocation, any
 * thread. Errors: -1 with a reason in err (err may be NULL when errlen is 0). */
#ifndef GP_POOLAPI_QUANTITY_H
#define GP_POOLAPI_QUANTITY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/* A quantity as an integer count of 1/scale units, rounded up (scale 1000
 * gives milli-units, 1 whole units, as Quantity.MilliValue()/Value() do).
 * Accepts an optional '+', digits with one optional '.', then one suffix
 * (Ki Mi Gi Ti Pi Ei, n u m k M G T P E) or an exponent e<int>/E<int>.
 * Refuses empty text, negatives, unknown suffixes, blanks, more than 30
 * significant digits and values over UINT64_MAX. *out is untouched on error. */
int poolapi_quantity_parse(const char *text, uint64_t scale, uint64_t *out, char *err,
                           size_t errlen) GP_MUST_USE;

/* A quantity-valued JSON member: a string as above or a non-negative
 * integer (times scale). `what` names the field in the error. */
int poolapi_quantity_json(const json_t *v, const char *what, uint64_t scale, uint64_t *out,
                          char *err, size_t errlen) GP_MUST_USE;

/* An extended resource's quantity (aliyun.com/gpu-mem, nvidia.com/gpu):
 * the API server admits only whole numbers there, so a fraction ("1500m",
 * "0.5") is refused instead of rounded up; "1k" and "2e3" are whole. */
int poolapi_quantity_whole(const json_t *v, const char *what, uint64_t *out, char *err,
                           size_t errlen) GP_MUST_USE;

#endif

/* fuzz_sim_trace.c -- gpupool-sim's openb CSV loader (trace.c): the input
 * is a node list, "\n==\n", a pod list (each written to a file), loaded
 * with sim_load_nodes / sim_load_pods; a small accepted trace is also
 * replayed once (replay.c), with the policy from the input's length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "replay.h"
#include "trace.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    const uint8_t *nodes;
    size_t n = fz_split(&data, &size, "\n==\n", &nodes);
    const char *node_path = fz_file_n(0, nodes, n);
    const char *pod_path = fz_file_n(1, data, size);
    struct sim_trace t;
    char err[512];
    sim_trace_init(&t);
    if (sim_load_nodes(&t, node_path, err, sizeof(err)) == 0 &&
        sim_load_pods(&t, pod_path, err, sizeof(err)) == 0 && t.node_count < 64 &&
        t.pod_count < 512) {
        struct sim_result res;
        err[0] = '\0';
        if (sim_replay(&t, (n & 1) ? PLACEMENT_BINPACK : PLACEMENT_GPUPOOL, 42, 100, &res, err,
                       sizeof(err)) < 0) {
            if (!err[0])
                abort(); /* a refusal says why */
        } else if (res.failed > res.pods || res.alloc_milli > res.capacity_milli) {
            abort(); /* no more placed than tried, no more allocated than there is */
        }
    }
    (void)sim_trace_capacity_milli(&t);
    sim_trace_free(&t);
    return 0;
}

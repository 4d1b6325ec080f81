/* Unit tests: DevicePlugin semantics through the encoded-bytes handlers
 * (plugin.c), the way the rpc server calls them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api.pb-c.h"
#include "fixtures.h"
#include "plugin.h"

struct world {
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct plugin_node node;
    struct rpc_handlers h;
};

static void start(struct world *w)
{
    char err[256];
    assert_int_equal(plugin_node_init(&w->node, &w->cfg, &w->inv, err, sizeof err), 0);
    w->h = plugin_node_handlers(&w->node, 0);
}

static int setup(void **state)
{
    struct world *w = calloc(1, sizeof *w);
    fixture_inventory(&w->inv, 4, 1);
    fixture_config(&w->cfg);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    struct world *w = *state;
    plugin_node_free(&w->node);
    free(w->cfg.time_slices);
    fixture_inventory_free(&w->inv);
    free(w);
    return 0;
}

static enum rpc_status call(struct world *w, enum plugin_method m, const ProtobufCMessage *req,
                            struct rpc_buf *resp, char *msg, size_t msglen)
{
    uint8_t buf[65536];
    size_t len = req ? protobuf_c_message_pack(req, buf) : 0;
    memset(resp, 0, sizeof *resp);
    msg[0] = '\0';
    return w->h.unary(w->h.ctx, NULL, m, buf, len, resp, msg, msglen);
}

static enum rpc_status allocate_ids(struct world *w, char **ids, size_t n,
                                    V1beta1__AllocateResponse **out, char *msg, size_t msglen)
{
    V1beta1__ContainerAllocateRequest c = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__ContainerAllocateRequest *cp = &c;
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    c.n_devices_ids = n;
    c.devices_ids = ids;
    req.n_container_requests = 1;
    req.container_requests = &cp;
    struct rpc_buf resp;
    enum rpc_status st = call(w, PLUGIN_ALLOCATE, &req.base, &resp, msg, msglen);
    *out = NULL;
    if (st == RPC_OK)
        *out = v1beta1__allocate_response__unpack(NULL, resp.len, resp.data);
    free(resp.data);
    return st;
}

static void test_options(void **state)
{
    struct world *w = *state;
    start(w);
    V1beta1__Empty e = V1BETA1__EMPTY__INIT;
    struct rpc_buf resp;
    char msg[256];
    assert_int_equal(call(w, PLUGIN_GET_DEVICE_PLUGIN_OPTIONS, &e.base, &resp, msg, sizeof msg),
                     RPC_OK);
    V1beta1__DevicePluginOptions *o =
        v1beta1__device_plugin_options__unpack(NULL, resp.len, resp.data);
    assert_non_null(o);
    assert_true(o->get_preferred_allocation_available);
    assert_false(o->pre_start_required);
    v1beta1__device_plugin_options__free_unpacked(o, NULL);
    free(resp.data);
}

static void test_allocate_ok_and_unknown(void **state)
{
    struct world *w = *state;
    start(w);
    char msg[512];
    V1beta1__AllocateResponse *r;
    char *ids[] = {w->inv.gpus[1].uuid, w->inv.gpus[3].uuid};
    assert_int_equal(allocate_ids(w, ids, 2, &r, msg, sizeof msg), RPC_OK);
    assert_int_equal(r->n_container_responses, 1);
    assert_string_equal(r->container_responses[0]->envs[0]->key, "NVIDIA_VISIBLE_DEVICES");
    v1beta1__allocate_response__free_unpacked(r, NULL);

    char *bad[] = {w->inv.gpus[1].uuid, "GPU-bogus"};
    assert_int_equal(allocate_ids(w, bad, 2, &r, msg, sizeof msg), RPC_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "unknown device: GPU-bogus"));
    assert_int_equal(allocate_ids(w, bad, 0, &r, msg, sizeof msg), RPC_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "lists no devices"));
}

static void test_allocate_garbage(void **state)
{
    struct world *w = *state;
    start(w);
    uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    struct rpc_buf resp = {0};
    char msg[256];
    assert_int_equal(
        w->h.unary(w->h.ctx, NULL, PLUGIN_ALLOCATE, junk, sizeof junk, &resp, msg, sizeof msg),
        RPC_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "cannot decode AllocateRequest"));
    assert_null(resp.data);
}

static void test_fail_requests_greater_than_one(void **state)
{
    struct world *w = *state;
    fixture_time_slice(&w->cfg, "nvidia.com/gpu", 2);
    w->cfg.fail_requests_greater_than_one = 1;
    start(w);
    char msg[512];
    V1beta1__AllocateResponse *r;
    char a[RESOURCE_ID_LEN], b[RESOURCE_ID_LEN];
    snprintf(a, sizeof a, "%s::0", w->inv.gpus[0].uuid);
    snprintf(b, sizeof b, "%s::1", w->inv.gpus[2].uuid);
    char *ids[] = {a, b};
    assert_int_equal(allocate_ids(w, ids, 2, &r, msg, sizeof msg), RPC_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "maximum request size for shared resources is 1; found 2"));
    assert_int_equal(allocate_ids(w, ids, 1, &r, msg, sizeof msg), RPC_OK);
    v1beta1__allocate_response__free_unpacked(r, NULL);
}

static void test_preferred(void **state)
{
    struct world *w = *state;
    start(w);
    V1beta1__ContainerPreferredAllocationRequest c =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
    V1beta1__ContainerPreferredAllocationRequest *cp = &c;
    V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    char *avail[] = {w->inv.gpus[0].uuid, w->inv.gpus[2].uuid, w->inv.gpus[3].uuid,
                     w->inv.gpus[3].uuid};
    char *must[] = {w->inv.gpus[2].uuid};
    c.n_available_deviceids = 4;
    c.available_deviceids = avail;
    c.n_must_include_deviceids = 1;
    c.must_include_deviceids = must;
    c.allocation_size = 2;
    req.n_container_requests = 1;
    req.container_requests = &cp;
    struct rpc_buf resp;
    char msg[256];
    assert_int_equal(call(w, PLUGIN_GET_PREFERRED_ALLOCATION, &req.base, &resp, msg, sizeof msg),
                     RPC_OK);
    V1beta1__PreferredAllocationResponse *r =
        v1beta1__preferred_allocation_response__unpack(NULL, resp.len, resp.data);
    assert_non_null(r);
    assert_int_equal(r->container_responses[0]->n_deviceids, 2);
    assert_string_equal(r->container_responses[0]->deviceids[0], w->inv.gpus[2].uuid);
    assert_string_equal(r->container_responses[0]->deviceids[1], w->inv.gpus[3].uuid);
    v1beta1__preferred_allocation_response__free_unpacked(r, NULL);
    free(resp.data);

    c.allocation_size = 0;
    assert_int_equal(call(w, PLUGIN_GET_PREFERRED_ALLOCATION, &req.base, &resp, msg, sizeof msg),
                     RPC_INVALID_ARGUMENT);
    c.allocation_size = 2;
    avail[1] = "GPU-nope";
    assert_int_equal(call(w, PLUGIN_GET_PREFERRED_ALLOCATION, &req.base, &resp, msg, sizeof msg),
                     RPC_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "GPU-nope"));
}

static V1beta1__ListAndWatchResponse *snapshot(struct world *w, size_t resource, uint64_t *gen)
{
    struct rpc_handlers h = plugin_node_handlers(&w->node, resource);
    struct rpc_buf buf;
    assert_int_equal(h.snapshot(h.ctx, &buf, gen), 0);
    V1beta1__ListAndWatchResponse *r =
        v1beta1__list_and_watch_response__unpack(NULL, buf.len, buf.data);
    free(buf.data);
    assert_non_null(r);
    return r;
}

static void test_snapshot_and_health_fan_out(void **state)
{
    struct world *w = *state;
    fixture_time_slice(&w->cfg, "nvidia.com/gpu", 4);
    start(w);
    uint64_t g1, g2, g3;
    V1beta1__ListAndWatchResponse *r = snapshot(w, 0, &g1);
    assert_int_equal(r->n_devices, 16);
    assert_string_equal(r->devices[5]->health, "Healthy");
    assert_int_equal(r->devices[15]->topology->n_nodes, 1);
    assert_int_equal(r->devices[15]->topology->nodes[0]->id, 1);
    v1beta1__list_and_watch_response__free_unpacked(r, NULL);

    /* The GPU's one record changes in the state; its 4 replicas follow. */
    assert_int_equal(node_state_set_gpu_health(plugin_node_state(&w->node), 1, false), 1);
    assert_int_equal(node_state_set_gpu_health(plugin_node_state(&w->node), 1, false), 0);
    r = snapshot(w, 0, &g2);
    assert_true(g2 > g1);
    for (size_t i = 0; i < 16; i++)
        assert_string_equal(r->devices[i]->health, i / 4 == 1 ? "Unhealthy" : "Healthy");
    v1beta1__list_and_watch_response__free_unpacked(r, NULL);

    assert_int_equal(node_state_set_gpu_health(plugin_node_state(&w->node), 1, true), 1);
    r = snapshot(w, 0, &g3);
    assert_true(g3 > g2);
    assert_string_equal(r->devices[5]->health, "Healthy");
    v1beta1__list_and_watch_response__free_unpacked(r, NULL);
}

static void test_register_request(void **state)
{
    struct world *w = *state;
    start(w);
    struct rpc_buf buf;
    assert_int_equal(plugin_node_register_request(&w->node, 0, &buf), 0);
    V1beta1__RegisterRequest *r = v1beta1__register_request__unpack(NULL, buf.len, buf.data);
    assert_non_null(r);
    assert_string_equal(r->version, "v1beta1");
    assert_string_equal(r->endpoint, "gpupool-nvidia-gpu.sock");
    assert_string_equal(r->resource_name, "nvidia.com/gpu");
    assert_true(r->options->get_preferred_allocation_available);
    v1beta1__register_request__free_unpacked(r, NULL);
    free(buf.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocate_ok_and_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocate_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fail_requests_greater_than_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_and_health_fan_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_request, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

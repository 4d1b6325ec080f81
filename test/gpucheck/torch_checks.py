"""torch_checks.py -- the PyTorch side of the GPU conformance kit.

Run by gpucheck.py, one case per process, with or without libgpupool-cuda
preloaded (the runner sets LD_PRELOAD, CUDA_DEVICE_MEMORY_LIMIT and the
region directory; this file never looks at them, it only uses PyTorch as an
application would):

    python3 torch_checks.py CASE [ARG...]

Every finding is one JSON object on one stdout line, flushed at once, so the
runner can act while the case still runs (read NVML, start a second
process, kill this one). Cases that hold memory print {"ev": "holding"} and
wait until stdin closes, so the runner decides when the memory goes back.
"""

import json
import statistics
import sys
import time

GiB = 1 << 30
MiB = 1 << 20


def say(**kw):
    sys.stdout.write(json.dumps(kw, sort_keys=True) + "\n")
    sys.stdout.flush()


def hold():
    say(ev="holding")
    sys.stdin.read()  # until the runner closes our stdin


def import_torch():
    import torch  # noqa: the point of the case
    return torch


def oom_types(torch):
    """torch.OutOfMemoryError since 2.4 (an alias of the older
    torch.cuda.OutOfMemoryError, which is what 1.13-2.3 raise)."""
    types = []
    for owner in (torch, torch.cuda):
        t = getattr(owner, "OutOfMemoryError", None)
        if t is not None and t not in types:
            types.append(t)
    return tuple(types)


def fill(torch, chunk, limit_bytes=None):
    """Allocates chunk-byte tensors until the allocator refuses. Returns the
    tensors (kept alive by the caller), their bytes and the error's type."""
    kept, err = [], None
    ceiling = limit_bytes if limit_bytes is not None else 1 << 50
    while len(kept) * chunk < ceiling * 2:  # never loop forever on a broken limit
        try:
            kept.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        except oom_types(torch) as e:
            err = type(e).__name__
            break
        except RuntimeError as e:  # an older torch's plain "CUDA out of memory"
            err = "RuntimeError:" + str(e).split("\n")[0][:80].replace(" ", "_")
            break
    torch.cuda.synchronize()
    return kept, len(kept) * chunk, err


def case_import():
    torch = import_torch()
    say(ev="torch", version=torch.__version__, cuda=str(torch.version.cuda))


def case_probe():
    torch = import_torch()
    say(ev="torch", version=torch.__version__, cuda=str(torch.version.cuda),
        available=bool(torch.cuda.is_available()),
        device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")


def case_context():
    """What a CUDA context plus the kernels of a small model cost on the GPU
    (outside any limit): the allowance per process of the physical check."""
    torch = import_torch()
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.nn.functional.gelu(a @ a).sum()
    torch.cuda.synchronize()
    say(ev="context", allocated=int(torch.cuda.memory_reserved()), check=float(b) == float(b))
    hold()


def case_limit(limit_bytes):
    """mem_get_info, the device's total, a tensor past the limit, then the
    limit filled in 512 MiB steps."""
    torch = import_torch()
    free, total = torch.cuda.mem_get_info()
    props_total = torch.cuda.get_device_properties(0).total_memory
    say(ev="meminfo", free=int(free), total=int(total), props_total=int(props_total))
    raised = "none"
    try:
        x = torch.empty(limit_bytes + GiB, dtype=torch.uint8, device="cuda")
        del x
    except oom_types(torch) as e:
        raised = type(e).__module__ + "." + type(e).__name__
    except RuntimeError as e:
        raised = "RuntimeError"
        say(ev="note", text=str(e).split("\n")[0][:200])
    say(ev="big_tensor", raised=raised)
    kept, got, err = fill(torch, 512 * MiB, limit_bytes)
    free2, _ = torch.cuda.mem_get_info()
    say(ev="filled", bytes=got, error=str(err), reserved=int(torch.cuda.memory_reserved()),
        free_after=int(free2))
    hold()


def case_fill(chunk_mib):
    torch = import_torch()
    torch.cuda.init()
    kept, got, err = fill(torch, int(chunk_mib) * MiB)
    say(ev="filled", bytes=got, error=str(err), reserved=int(torch.cuda.memory_reserved()))
    hold()


def case_graphs(limit_bytes):
    """A captured graph that allocates (the caching allocator's private graph
    pool takes its memory from the driver during capture) replays with the
    eager result; its memory is inside the limit; a capture that would need
    more than the limit is refused with an out-of-memory error."""
    torch = import_torch()
    torch.manual_seed(0)
    a = torch.randn(2048, 2048, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            warm = (torch.relu(a @ a) + 1).sum()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        scratch = torch.empty(GiB // 4, dtype=torch.float32, device="cuda")
        scratch.fill_(1.0)
        out = (torch.relu(a @ a) + scratch[: a.numel()].view_as(a)).sum()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    expect = (torch.relu(a @ a) + 1).sum()
    same = bool(torch.allclose(out, expect, rtol=1e-3))
    free1, _ = torch.cuda.mem_get_info()
    say(ev="graph", replay_matches=same, charged_by_graph=int(free0 - free1),
        total=int(total), warm=float(warm) == float(warm))
    # Last: a failed capture may leave the stream unusable.
    raised = "none"
    g2 = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g2):
            big = torch.empty(limit_bytes + GiB, dtype=torch.uint8, device="cuda")
            big.fill_(1)
    except Exception as e:  # the capture's exit may raise on top of the refusal
        chain, cause = [], e
        while cause is not None and len(chain) < 5:
            chain.append(cause)
            cause = cause.__context__
        oom = [c for c in chain if isinstance(c, oom_types(torch)) or
               "out of memory" in str(c).lower()]
        raised = type(e).__name__ + (":out_of_memory" if oom else "")
        say(ev="note", text=" <- ".join(str(c).split("\n")[0][:120] for c in chain))
    say(ev="graph_over_limit", raised=raised)


def case_expandable(limit_bytes):
    """Under expandable_segments:True PyTorch maps cuMemCreate chunks into
    one reservation and unmaps/releases them on empty_cache: fill, give half
    back, fill again with another size."""
    torch = import_torch()
    kept, got, err = fill(torch, 256 * MiB, limit_bytes)
    say(ev="filled", bytes=got, error=str(err), reserved=int(torch.cuda.memory_reserved()))
    del kept[::2]
    torch.cuda.empty_cache()
    more, got2, err2 = fill(torch, 384 * MiB, limit_bytes)
    free, total = torch.cuda.mem_get_info()
    say(ev="refilled", bytes=got2, kept_bytes=len(kept) * 256 * MiB, error=str(err2),
        reserved=int(torch.cuda.memory_reserved()), free=int(free), total=int(total))
    hold()


def case_async_free(mib):
    """backend:cudaMallocAsync: take MIB (in 512 MiB tensors), free it; PyTorch's pool keeps it
    (it raises the pool's release threshold), so the process still holds
    the memory on the GPU while it holds none in PyTorch's terms."""
    torch = import_torch()
    xs = [torch.empty(512 * MiB, dtype=torch.uint8, device="cuda") for _ in range(int(mib) // 512)]
    for i in range(len(xs)):
        xs[i].fill_(1)  # touched, so the memory is really in use
    del xs
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    say(ev="freed", reserved=int(torch.cuda.memory_reserved()), free=int(free), total=int(total))
    hold()


def case_graphs_async(limit_bytes, graph_bytes):
    """backend:cudaMallocAsync under stream capture: a tensor made and freed
    inside the graph becomes the graph's memory nodes. The driver takes that
    memory when the graph is launched, not when it was captured, so the
    limit must still hold at replay, after the process filled what was left
    (issue 23: graph allocation nodes are charged when the graph takes the
    memory)."""
    torch = import_torch()
    warm = torch.ones(1 << 20, dtype=torch.uint8, device="cuda")
    warm.fill_(1)
    int(warm.sum())  # the kernels are loaded before the capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            x = torch.empty(graph_bytes, dtype=torch.uint8, device="cuda")
            x.fill_(1)
            total = x.sum()
            del x
    except Exception as e:
        oom = isinstance(e, oom_types(torch)) or "out of memory" in str(e).lower()
        say(ev="captured", ok=False, oom=oom, text=str(e).split("\n")[0][:160])
        return
    free, _ = torch.cuda.mem_get_info()
    say(ev="captured", ok=True, free_after_capture=int(free))
    kept, got, err = fill(torch, 512 * MiB, limit_bytes)
    say(ev="filled", bytes=got, error=str(err))
    try:
        g.replay()
        torch.cuda.synchronize()
        replay = "ok:sum=%d" % int(total)
    except Exception as e:  # a limit enforced at launch refuses here
        replay = type(e).__name__ + (":out_of_memory" if "out of memory" in str(e).lower()
                                     else "")
    say(ev="replayed", replay=replay)
    hold()


def case_train(steps, warmup):
    """One training step of a small MLP, fixed seed: median seconds."""
    torch = import_torch()
    import torch.nn as nn
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(),
                          nn.Linear(4096, 2048)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 2048, device="cuda")
    y = torch.randn(512, 2048, device="cuda")
    times = []
    loss = None
    for i in range(int(warmup) + int(steps)):
        torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= int(warmup):
            times.append(time.perf_counter() - t)
    say(ev="train", median_s=statistics.median(times), min_s=min(times), steps=len(times),
        loss=float(loss))


def case_matmul(seconds):
    """A 4096 x 4096 fp16 matmul loop for the given seconds (after a warm-up):
    matmuls per second the GPU completed."""
    torch = import_torch()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    for _ in range(10):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(16):  # a bounded queue, as a training loop's steps are
            torch.matmul(a, b)
        torch.cuda.synchronize()
        n += 16
    s = time.perf_counter() - t0
    say(ev="matmul", per_s=n / s, n=n, s=s)


CASES = {
    "import": (case_import, 0),
    "probe": (case_probe, 0),
    "context": (case_context, 0),
    "limit": (case_limit, 1),
    "fill": (case_fill, 1),
    "graphs": (case_graphs, 1),
    "expandable": (case_expandable, 1),
    "async-free": (case_async_free, 1),
    "graphs-async": (case_graphs_async, 2),
    "train": (case_train, 2),
    "matmul": (case_matmul, 1),
}


def main(argv):
    if len(argv) < 2 or argv[1] not in CASES or len(argv) - 2 != CASES[argv[1]][1]:
        sys.stderr.write("usage: torch_checks.py %s [ARG...]\n" % "|".join(sorted(CASES)))
        return 2
    fn, _ = CASES[argv[1]]
    fn(*[int(a) for a in argv[2:]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

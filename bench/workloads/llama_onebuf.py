"""llama_onebuf.py [options] - a Llama-shaped greedy decode that allocates as llama.cpp and vLLM do:
ALL weights in one device allocation (one torch.empty; every layer's matrices are views into it)
and the KV cache as one preallocated pool of blocks (vLLM's paged layout: [layer, block, K|V,
token-in-block, KV head, head dim]), each sequence's blocks picked at random from the pool
through a block table. Plain PyTorch (no transformers), bf16, random weights from a seed (no
download): RMSNorm, rotary embeddings, grouped-query attention over the gathered blocks, SwiGLU.

Default size: 8 layers of hidden 6144 / intermediate 17408 / 48 heads / 8 KV heads / 32000-token
vocabulary, about 6.8 GiB of weights (an 8-layer Llama scaled up), and a 1 GiB KV pool; or
--weights-gib G fits the layer count to G GiB at these widths. Each request: a seeded random
prompt of --prompt tokens for each of --batch sequences, one prefill pass, then --new greedy
steps. Without --seconds: one warm-up request, then one timed request. With --seconds S: the
warm-up, the start barrier (bench/workloads/progress.py, for the sweep harness), then requests
back to back for S seconds, each with new prompts and new blocks.

Prints one JSON line: weights and pool bytes, layers, prefill and decode times, decode tokens/s
("tasks_per_s": tokens per second over the timed loop, as bench/micro/run_sweep.sh reads it),
startup_s (from the process's start to the end of the warm-up request), "steady_per_s" (the
same as tasks_per_s, for bench/overhead/run_overhead.sh), the sha256 of every generated token id (identical across runs of the same options: every op is
deterministic, the KV writes go to distinct slots), the first and last tokens, and each timed
request's own digest (its first 16 hex digits, up to 256 requests: "request_digests"; request N
is the same in every run of the same options, so two runs of --seconds S that completed
different numbers of requests still compare request by request). With --compat,
also the FOOTPRINT_MIB and RESULT lines of bench/compat/ (compat.py)."""
import argparse
import hashlib
import json
import math
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
T_START = time.time()
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from progress import Progress, barrier  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--weights-gib", type=float, default=0, help="fit the layer count to this size")
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--hidden", type=int, default=6144)
ap.add_argument("--inter", type=int, default=17408)
ap.add_argument("--heads", type=int, default=48)
ap.add_argument("--kv-heads", type=int, default=8)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--kv-gib", type=float, default=1.0, help="the KV pool's size")
ap.add_argument("--block", type=int, default=16, help="tokens per KV block")
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--prompt", type=int, default=32)
ap.add_argument("--new", type=int, default=64)
ap.add_argument("--seconds", type=float, default=0)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--compat", action="store_true", help="also print FOOTPRINT_MIB and RESULT")
a = ap.parse_args()

H, I, NH, KVH, V = a.hidden, a.inter, a.heads, a.kv_heads, a.vocab
if H % NH or NH % KVH:
    sys.exit("llama_onebuf: hidden must divide by heads, heads by kv-heads")
D = H // NH
ALIGN = 256  # elements (512 bytes) between tensors in the buffer
DT = torch.bfloat16
ESZ = 2


def process_age():
    """Seconds since this process started (/proc/self/stat), or since this script began."""
    try:
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            return float(f.read().split()[0]) - start / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time() - T_START


def layer_shapes():
    return [("attn_norm", (H,)), ("wq", (H, H)), ("wk", (KVH * D, H)), ("wv", (KVH * D, H)),
            ("wo", (H, H)), ("mlp_norm", (H,)), ("w_gate", (I, H)), ("w_up", (I, H)),
            ("w_down", (H, I))]


def aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


LAYER_ELEMS = sum(aligned(math.prod(s)) for _, s in layer_shapes())
OUTER_ELEMS = aligned(V * H) * 2 + aligned(H)
layers = a.layers
if a.weights_gib > 0:
    layers = max(1, int((a.weights_gib * 2**30 / ESZ - OUTER_ELEMS) // LAYER_ELEMS))
total = OUTER_ELEMS + layers * LAYER_ELEMS

torch.manual_seed(a.seed)
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
t0 = time.time()
# --- the one weights allocation, and views into it
buf = torch.empty(total, dtype=DT, device=dev)
off = 0


def take(shape):
    global off
    n = math.prod(shape)
    v = buf[off:off + n].view(shape)
    off += aligned(n)
    return v


gen = torch.Generator(device=dev).manual_seed(a.seed + 1)
embed = take((V, H))
W = []
for _ in range(layers):
    W.append({name: take(shape) for name, shape in layer_shapes()})
final_norm = take((H,))
lm_head = take((V, H))
assert off == total, (off, total)
embed.normal_(0, 1.0, generator=gen)
for w in W:
    for name, t in w.items():
        if name.endswith("norm"):
            t.fill_(1.0)
        else:
            t.normal_(0, 1.0 / math.sqrt(t.shape[1]), generator=gen)
final_norm.fill_(1.0)
lm_head.normal_(0, 1.0 / math.sqrt(H), generator=gen)

# --- the one KV pool: [layer, block, K|V, token, KV head, head dim]
per_block = layers * 2 * a.block * KVH * D
nblocks = int(a.kv_gib * 2**30 / ESZ // per_block)
max_len = a.prompt + a.new
need = a.batch * -(-max_len // a.block)
if nblocks < need:
    sys.exit(f"llama_onebuf: a {a.kv_gib} GiB pool holds {nblocks} blocks; a request needs {need}")
pool = torch.empty(nblocks * per_block, dtype=DT, device=dev)
pool.zero_()
kv = pool.view(layers, nblocks, 2, a.block, KVH, D)

# rotary tables (float32)
inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
ang = torch.outer(torch.arange(max_len, device=dev, dtype=torch.float32), inv)
COS = torch.cat([ang.cos(), ang.cos()], dim=-1)
SIN = torch.cat([ang.sin(), ang.sin()], dim=-1)
torch.cuda.synchronize()
init_s = time.time() - t0


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-5)).to(DT) * w


def rope(x, pos):
    # x: [B, S, heads, D]; pos: [S]
    c, s = COS[pos][None, :, None, :], SIN[pos][None, :, None, :]
    xf = x.float()
    x1, x2 = xf[..., : D // 2], xf[..., D // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    return (xf * c + rot * s).to(DT)


def forward(tokens, start, table):
    """tokens [B, S] at positions start..start+S-1; table [B, blocks] of pool block ids.
    Writes their K/V into the pool and returns the next token of each sequence [B]."""
    B, S = tokens.shape
    pos = torch.arange(start, start + S, device=dev)
    T = start + S
    nb = -(-T // a.block)
    blk = table[:, pos // a.block]  # [B, S]
    slot = (pos % a.block).expand(B, S)
    x = embed[tokens]  # [B, S, H]
    causal = None
    if S > 1:
        causal = torch.arange(T, device=dev)[None, :] > pos[:, None]  # [S, T]
    for li, w in enumerate(W):
        h = rms(x, w["attn_norm"])
        q = rope(torch.nn.functional.linear(h, w["wq"]).view(B, S, NH, D), pos)
        k = rope(torch.nn.functional.linear(h, w["wk"]).view(B, S, KVH, D), pos)
        v = torch.nn.functional.linear(h, w["wv"]).view(B, S, KVH, D)
        kc, vc = kv[li, :, 0], kv[li, :, 1]  # [blocks, block, KVH, D] views of the pool
        kc[blk, slot] = k
        vc[blk, slot] = v
        K = kc[table[:, :nb]].reshape(B, nb * a.block, KVH, D)[:, :T]
        Vv = vc[table[:, :nb]].reshape(B, nb * a.block, KVH, D)[:, :T]
        K = K.transpose(1, 2).repeat_interleave(NH // KVH, dim=1)  # [B, NH, T, D]
        Vv = Vv.transpose(1, 2).repeat_interleave(NH // KVH, dim=1)
        sc = (q.transpose(1, 2) @ K.transpose(-1, -2)).float() / math.sqrt(D)  # [B, NH, S, T]
        if causal is not None:
            sc = sc.masked_fill(causal, float("-inf"))
        att = (torch.softmax(sc, dim=-1).to(DT) @ Vv).transpose(1, 2).reshape(B, S, H)
        x = x + torch.nn.functional.linear(att, w["wo"])
        h = rms(x, w["mlp_norm"])
        g = torch.nn.functional.silu(torch.nn.functional.linear(h, w["w_gate"]))
        x = x + torch.nn.functional.linear(g * torch.nn.functional.linear(h, w["w_up"]), w["w_down"])
    logits = torch.nn.functional.linear(rms(x[:, -1], final_norm), lm_head)
    return logits.float().argmax(dim=-1)


def request(seed):
    """One request: returns (generated ids [B, new] on the host, prefill s, decode s)."""
    g = torch.Generator(device=dev).manual_seed(a.seed * 1000003 + seed)
    prompt = torch.randint(0, V, (a.batch, a.prompt), device=dev, generator=g)
    table = torch.randperm(nblocks, device=dev, generator=g)[:need].view(a.batch, -1)
    out = []
    with torch.inference_mode():
        torch.cuda.synchronize()
        t0 = time.time()
        nxt = forward(prompt, 0, table)
        out.append(nxt)
        torch.cuda.synchronize()
        t1 = time.time()
        for i in range(1, a.new):
            nxt = forward(nxt[:, None], a.prompt + i - 1, table)
            out.append(nxt)
        torch.cuda.synchronize()
        t2 = time.time()
    return torch.stack(out, dim=1).cpu(), t1 - t0, t2 - t1


ids, _, _ = request(0)  # warm-up (and the first digest input)
h = hashlib.sha256(ids.numpy().tobytes())
first = ids[0, :8].tolist()
startup_s = process_age()  # to the end of the warm-up (before the barrier's wait)
barrier()
prog = Progress()
n = 0
tokens = 0
pre = dec = 0.0
tl0 = time.time()
per_request = []  # the first MAX_DIGESTS timed requests' own digests
MAX_DIGESTS = 256
while True:
    n += 1
    ids, p, d = request(n)
    h.update(ids.numpy().tobytes())
    if len(per_request) < MAX_DIGESTS:
        per_request.append(hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16])
    pre += p
    dec += d
    tokens += ids.numel()
    prog.tick(tokens)
    if time.time() - tl0 >= a.seconds:
        break
loop_s = time.time() - tl0
steps = n * (a.new - 1)
rec = {
    "program": "llama_onebuf", "layers": layers, "hidden": H, "intermediate": I, "heads": NH,
    "kv_heads": KVH, "vocab": V,
    "weights_bytes": total * ESZ, "weights_gib": round(total * ESZ / 2**30, 3),
    "weights_allocations": 1, "kv_pool_bytes": pool.numel() * ESZ, "kv_blocks": nblocks,
    "kv_blocks_per_request": need, "batch": a.batch, "prompt": a.prompt, "new_tokens": a.new,
    "init_s": round(init_s, 3), "startup_s": round(startup_s, 3), "requests": n,
    "tokens": tokens, "seconds": round(loop_s, 3),
    "prefill_s": round(pre / n, 4),
    "decode_tokens_per_s": round(a.batch * steps / dec, 3) if dec > 0 else None,
    "tokens_per_s": round(tokens / loop_s, 3), "tasks_per_s": round(tokens / loop_s, 3),
    "unit": "tokens", "steady_per_s": round(tokens / loop_s, 3), "steady_s": round(loop_s, 3),
    "max_reserved_bytes": torch.cuda.max_memory_reserved(),
    "digest": h.hexdigest(), "request_digests": per_request, "first_tokens": first, "last_tokens": ids[0, -8:].tolist(),
}
if a.seconds > 0:
    rec.update(prog.fields(tokens))
print(json.dumps(rec), flush=True)
if a.compat:
    print(f"FOOTPRINT_MIB {math.ceil(torch.cuda.max_memory_reserved() / 2**20)}")
    print(f"INFO decode_tokens_per_s={rec['decode_tokens_per_s']} weights_gib={rec['weights_gib']}")
    print(f"RESULT llama_onebuf {h.hexdigest()} tol=0 {sum(first)} {sum(rec['last_tokens'])}",
          flush=True)

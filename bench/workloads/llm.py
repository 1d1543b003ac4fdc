"""llm.py GIB SECONDS - one instance of workload D (multi-LLM): a Hugging Face transformers
Llama-architecture model built from a config with random bf16 weights (no download), about GIB
GiB of weights, serving greedy-decode requests back to back.

Each request: a 32-token random prompt, prefill, then 32 new tokens (greedy, KV cache). After
one warm-up request the loop runs for SECONDS of wall time and prints one JSON line: tokens
generated per second ("tasks_per_s" is the same number, so the section 7.1 tools read it), the
model's layers and parameter bytes, and the loop's progress samples (progress.py). The layer
count is chosen so the weights fill GIB: 4096 hidden, 11008 intermediate, 32 heads, 8 KV heads,
32000-token vocabulary (Llama-2-7B shapes; about 0.33 GiB a layer plus 0.49 GiB of
embeddings)."""
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from progress import Progress, barrier  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

if len(sys.argv) < 3:
    sys.exit("usage: llm.py GIB SECONDS")
gib, seconds = float(sys.argv[1]), float(sys.argv[2])
LAYER = 2 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 11008) + 2 * 4096
EMBED = 2 * 2 * 32000 * 4096
layers = max(1, int((gib * 2**30 - EMBED) // LAYER))
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
cfg = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                  num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                  max_position_embeddings=1024)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
params = sum(p.numel() * p.element_size() for p in model.parameters())


def request(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    prompt = torch.randint(0, cfg.vocab_size, (1, 32), device="cuda", generator=g)
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    torch.cuda.synchronize()
    return out.shape[1] - prompt.shape[1]


request(0)
barrier()
tokens, n, t0, prog = 0, 0, time.time(), Progress()
while time.time() - t0 < seconds:
    n += 1
    tokens += request(n)
    prog.tick(tokens)
el = time.time() - t0
print(json.dumps({"program": "llm", "gib": gib, "layers": layers, "param_bytes": params,
                  "requests": n, "tokens": tokens, "seconds": round(el, 3),
                  "tokens_per_s": round(tokens / el, 3), "tasks_per_s": round(tokens / el, 3),
                  **prog.fields(tokens)}),
      flush=True)

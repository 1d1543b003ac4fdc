"""A transformers Llama built from a config with random bf16 weights (about 7 GB), prefill and
greedy decode, for running under `msched run --budget` at half its footprint.

Prints one JSON line: digest of the generated tokens, decode tokens per second, the model's
parameter bytes. Run it once without the shim and once under a budget and compare digests."""
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 16
new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 32
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.set_default_dtype(torch.bfloat16)
cfg = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                  num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                  max_position_embeddings=1024)
t0 = time.time()
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
torch.cuda.synchronize()
t_init = time.time() - t0
params = sum(p.numel() * p.element_size() for p in model.parameters())
prompt = torch.randint(0, cfg.vocab_size, (1, 32), device="cuda")
with torch.no_grad():
    model.generate(prompt, max_new_tokens=2, min_new_tokens=2, do_sample=False)  # warm-up
    torch.cuda.synchronize()
    t0 = time.time()
    out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         do_sample=False)
    torch.cuda.synchronize()
    dt = time.time() - t0
print(json.dumps({
    "program": "llama_budget",
    "digest": hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest(),
    "param_bytes": params,
    "init_s": round(t_init, 2),
    "decode_tokens_per_s": round(new_tokens / dt, 3),
    "tokens": out[0, -8:].tolist(),
}), flush=True)

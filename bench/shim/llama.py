"""A transformers Llama model built from a config with random weights: prefill and greedy
decode of 64 tokens. No download: the model is made from LlamaConfig."""
from common import deterministic, digest, profiled, report

torch = deterministic()
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                  num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                  max_position_embeddings=512)
model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
prompt = torch.randint(0, cfg.vocab_size, (1, 32), device="cuda")


def run():
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=64, do_sample=False, min_new_tokens=64)


out, kernels, other = profiled(run)
report("llama", digest=digest(out), tokens=out.shape[1], gpu_kernels=kernels, gpu_other=other)

"""Hugging Face transformers generate: a Llama built from LlamaConfig with random bf16 weights
(no download; seeded): 12 layers, hidden 2048, 16 heads, 4 KV heads, 32000-token vocabulary
(about 1.3 GiB of weights); greedy decoding of 64 new tokens for four 32-token prompts with the
KV cache. About 1.6 GiB. Hashes the generated token ids (printed exactly in the INFO line)."""
from compat import Digest, finish, torch_footprint_mib, torch_setup

torch = torch_setup()
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                  num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=4,
                  max_position_embeddings=512, pad_token_id=0)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
torch.set_default_dtype(torch.float32)
gen = torch.Generator(device="cuda").manual_seed(11)
prompt = torch.randint(3, cfg.vocab_size, (4, 32), device="cuda", generator=gen)
with torch.no_grad():
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=64,
                         min_new_tokens=64, do_sample=False, pad_token_id=0)
    logits = model(out).logits[:, -1].float()
torch.cuda.synchronize()
new = out[:, prompt.shape[1]:]
d = Digest().add(new, logits)
d.value(float(new.sum())).value(float(logits.abs().sum()))
finish("hf_llama_generate", d, torch_footprint_mib(), tol=1e-3,
       last_tokens=",".join(str(t) for t in new[:, -4:].reshape(-1).tolist()))

#!/usr/bin/env python3
"""Write a DeepSeek-style (MLA) model folder for SGLang to serve with `--load-format dummy`.

    make_tiny_mla_model.py OUT_DIR [--shape tiny|v2-lite|v3-16h|v3-128h]

OUT_DIR gets a `config.json` and a byte-level BPE tokenizer of 4096 tokens, trained here, offline, on the
first 40 modules of Python's standard library. There are no weights: `--load-format dummy` makes SGLang fill
them with seeded random values (patch set dummy_weights_scaled: at a trained model's scale). Shapes (every
one: kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128 — the 576-wide FP8 row):

- `tiny` (default): 4 layers, hidden 2048, 16 heads, every layer dense: exercises the path, not the kernels.
- `v2-lite`: DeepSeek-V2-Lite at full size, from its published config: 27 layers, hidden 2048, 16 heads,
  no q LoRA, YaRN rope (factor 40), MoE from layer 1 (64 routed experts of 1408 + 2 shared, top 6; layer 0
  dense, 10944). 15.7 B parameters, ~31 GB in BF16: one H200.
- `v3-16h`: DeepSeek-V3's attention (hidden 7168, q_lora_rank 1536, YaRN rope) as one GPU of a TP-8
  deployment sees it: 16 of its 128 heads, all 61 layers; the MLP is the per-GPU share of V3's dense MLP
  (18432 / 8 = 2304, every layer dense: V3's MoE layers would need 671 B parameters). ~11 GB.
- `v3-128h`: the same with all 128 heads on the GPU, as DP-attention deployments run every GPU. ~29 GB.

The vocabulary is the tokenizer's 4096 for every shape (the published 102400 / 129280 would only add an
embedding and an LM head of 0.4-1.9 GB, not attention work), so every id a model emits can be decoded.

Needs `tokenizers` and `transformers` (the GPU host's image has both). Adapted from the script of the
team's live-server work on an H200 (2026-11-30): same config and tokenizer.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

VOCAB_SIZE = 4096
EOS = "<|endoftext|>"
CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"

TINY = dict(
    architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2", vocab_size=VOCAB_SIZE, hidden_size=2048,
    intermediate_size=4096, moe_intermediate_size=1408, num_hidden_layers=4, num_attention_heads=16,
    num_key_value_heads=16, n_shared_experts=2, n_routed_experts=64, routed_scaling_factor=1.0,
    kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
    topk_method="greedy", n_group=1, topk_group=1, num_experts_per_tok=6, moe_layer_freq=1,
    first_k_dense_replace=4,  # = num_hidden_layers: every layer dense (no MoE kernels on the path)
    norm_topk_prob=False, scoring_func="softmax", hidden_act="silu",
    max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None,
    attention_bias=False, attention_dropout=0.0, tie_word_embeddings=False, torch_dtype="bfloat16",
    bos_token_id=0, eos_token_id=0, initializer_range=0.02, use_cache=True,
)


YARN_V2_LITE = dict(type="yarn", factor=40, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1,
                    mscale=0.707, mscale_all_dim=0.707)
YARN_V3 = dict(type="yarn", factor=40, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1,
               mscale=1.0, mscale_all_dim=1.0)
V2_LITE = {**TINY, "num_hidden_layers": 27, "intermediate_size": 10944, "first_k_dense_replace": 1,
           "max_position_embeddings": 163840, "rope_scaling": YARN_V2_LITE}
V3_16H = {**TINY, "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 16,
          "num_key_value_heads": 16, "q_lora_rank": 1536, "intermediate_size": 2304, "first_k_dense_replace": 61,
          "max_position_embeddings": 163840, "rope_scaling": YARN_V3}
V3_128H = {**V3_16H, "num_attention_heads": 128, "num_key_value_heads": 128}
SHAPES = {"tiny": TINY, "v2-lite": V2_LITE, "v3-16h": V3_16H, "v3-128h": V3_128H}
CONFIG = TINY  # the name earlier scripts import


def train_tokenizer(out: str) -> None:
    """A byte-level BPE tokenizer (the EOS token is id 0), saved as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:40]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(corpus, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[EOS],
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", help="the model folder to write (made if missing)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="which model (see above)")
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    train_tokenizer(args.out_dir)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(SHAPES[args.shape], f, indent=1)
    print("model dir", args.out_dir, sorted(os.listdir(args.out_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

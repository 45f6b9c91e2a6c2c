#!/usr/bin/env python3
"""Write a tiny DeepSeek-V2-style (MLA) model folder for SGLang to serve with `--load-format dummy`.

    make_tiny_mla_model.py OUT_DIR

OUT_DIR gets a `config.json` (DeepseekV2ForCausalLM: 4 layers, hidden 2048, 16 heads, kv_lora_rank 512,
qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, every layer dense) and a byte-level BPE
tokenizer of 4096 tokens, trained here, offline, on the first 40 modules of Python's standard library.
There are no weights: `--load-format dummy` makes SGLang fill them with seeded random values, which is
enough to exercise attention backends, the KV cache and the benchmark path.

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

CONFIG = dict(
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
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    train_tokenizer(args.out_dir)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=1)
    print("model dir", args.out_dir, sorted(os.listdir(args.out_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

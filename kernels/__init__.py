"""GPU kernels used by the experiments (optional extra: needs torch and triton).

Nothing here is imported by the harness itself, so the harness installs and runs without them.

`fp8_mla_decode.py` and `fp8_mla_decode_cuda.py` are the one source of the FP8 MLA decode kernel, and
`mla_prefill_gather.py` of the paged prefill gather. Patch sets name them in their patchset.yaml
(`files_from`: `custom_fp8_mla`, `flashmla_gather_prefill`) and apply them byte for byte, in every variant:
an edit here is what the next attempt applies. No copy of them belongs under patches/
(`tests/unit/test_house_rules.py`).
"""

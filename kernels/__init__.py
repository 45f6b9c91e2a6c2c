"""GPU kernels used by the experiments (optional extra: needs torch and triton).

Nothing here is imported by the harness itself, so the harness installs and runs without them.

`fp8_mla_decode.py` and `fp8_mla_decode_cuda.py` are the one source of the FP8 MLA decode kernel. The
`custom_fp8_mla` patch set carries generated copies of them (in each of its variants): after editing either,
run `python3 scripts/sync_kernel_copies.py`; until then `tests/tools/test_kernel_copies.py` fails, naming the
copy that differs.
"""

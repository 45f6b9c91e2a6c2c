"""GPU kernels used by the experiments (optional extra: needs torch and triton).

Nothing here is imported by the harness itself, so the harness installs and runs without them.
"""

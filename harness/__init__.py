"""Experiment orchestration for tuning SGLang servers on GPU boxes."""

__version__ = "0.1.0"

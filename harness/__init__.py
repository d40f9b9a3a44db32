"""Conformance and benchmark harness for the DeepSeek-V4 sparse-attention kernels (docs/contract.md)."""

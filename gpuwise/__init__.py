"""gpuwise: plan, price and schedule deep-learning training on rented and shared GPUs.

Layers (lower never imports higher):
hardware -> workload -> estimate -> plan / policies -> sim / runtime -> cli / service
"""

__version__ = "0.1.0"

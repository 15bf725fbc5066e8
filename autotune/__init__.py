"""autotune: find the best way to deploy a model on vLLM for a given workload."""

__version__ = "0.1.0"

"""sparkbake: reproducible vLLM container images for NVIDIA DGX Spark."""

__all__ = ["__version__"]

__version__ = "0.1.0"

"""gpucarve: share GPUs fully and fairly."""

__version__ = "0.1.0"

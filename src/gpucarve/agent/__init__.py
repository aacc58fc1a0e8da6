"""The node health agent: reads each GPU (through NVML behind a seam, so tests drive faults
without a GPU), decides with hysteresis which GPUs are out of service, and says so on the
Node (`agent/health_loop.py`), where the scheduler stops placing on their slices."""

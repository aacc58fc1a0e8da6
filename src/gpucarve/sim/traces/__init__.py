"""Workloads to simulate: the seeded synthetic scenarios, a policy's own scenario, the trace
file format, and the Alibaba trace's import."""

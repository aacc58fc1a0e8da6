"""What gpucarve shows Prometheus: the scheduler's collectors (`scheduler_metrics`)."""

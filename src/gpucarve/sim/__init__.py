"""The simulator: replays workloads through the same engine the scheduler uses."""

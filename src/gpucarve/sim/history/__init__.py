"""A cluster's own history in the simulator's trace format: kept (`store`), and replayed
against what really happened (`replay`)."""

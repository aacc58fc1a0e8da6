"""Nodes into the inventory: their GPUs and slices, the devices DRA publishes, MIG layouts,
and the devices really handed out as the node agent reports them."""

"""The MIG planner: the layouts one GPU, one node and one pool can take, and the hint placement
gives when a repartition could make a missing instance."""

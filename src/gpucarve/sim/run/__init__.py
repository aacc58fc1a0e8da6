"""Running a simulation: the event loop over the engine (`runner`), what it acts on
(`sim_port`), its handlers for failing GPUs, MIG changes, inference scaling and slowdowns, the
baselines, and what a run records and reports (`records`, `metrics`, `report`)."""

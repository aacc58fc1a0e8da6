"""The scheduler room: the loop (`loop`) that builds the view, runs the engine's cycle and acts
through the API room (bindings, evictions, status, Events, MIG hand-off, node labels)."""

"""Pods into workloads and gangs: their facts, the index the view reads them in, the owner
kinds that make pods a gang, their assignment annotation, and what their claims ask."""

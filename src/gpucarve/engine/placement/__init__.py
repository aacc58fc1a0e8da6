"""Placement: the filter and score plugins behind their interfaces, the fragmentation model,
and the placer that puts a gang on nodes through one path."""

"""What is bound into claimed slices: the running workloads, the slices each pod holds (by
annotation, device truth or allocated claim), and the step from the last view."""

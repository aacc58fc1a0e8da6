"""The published fill experiment (`bench fill`): the trace's arrays, the experiment and its
marks, gpucarve placed through the engine, and the LP bounds."""

"""pytest-jetmem: memory-mode regression testing of CUDA code."""

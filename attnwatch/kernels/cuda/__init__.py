"""Hand-written CUDA attention kernels (.cu sources) and their loader (`launch.py`)."""

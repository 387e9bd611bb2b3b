"""CUTLASS 3.x (CuTe) sources, tile configurations, build and ctypes loader of the CUTLASS 3-kernel variants."""

"""The timing engine: per-call device timing with L2 flushing, adaptive round-robin sampling,
CUDA-graph replay for launch-bound cases, clock/throttle monitoring and derived metrics.

Modules: `timers` (one block of timed calls, CUDA events or host wall-clock), `gpu_state`
(NVML clocks and throttle reasons), `engine` (warm-up and the interleaved adaptive sampler),
`graphs` (CUDA-graph replay timing), `derived` (CaseTiming, TFLOPS, gaps to SDPA).
torch and pynvml are imported lazily: this package also loads on a dashboard host.
"""

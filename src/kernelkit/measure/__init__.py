"""The measurement engine: the timer (modes, warm-up, stopping rule) and its environment, the samplers of each mode
(samplers: cold and hot; graph; kernel_time with cupti_trace), statistics (stats), clocks (NVML, read-only), device
ceilings (device) and the environment fingerprint (fingerprint)."""

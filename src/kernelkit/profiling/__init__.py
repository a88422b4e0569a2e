"""Where the time goes: torch.profiler tables and traces, Nsight Compute metrics, and the kernels' PTX/SASS."""

"""oneshot: a CUDA library built by one `nvcc -shared` step (no `-c`), for sparkbake's tests."""

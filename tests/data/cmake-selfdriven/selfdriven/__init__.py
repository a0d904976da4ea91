"""selfdriven: a CUDA library whose setup.py runs CMake itself (two FetchContent dependencies)."""

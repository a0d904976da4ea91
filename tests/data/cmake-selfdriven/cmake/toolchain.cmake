# The project's own toolchain file, which setup.py passes to CMake on its command line: it
# takes the place of any CMAKE_TOOLCHAIN_FILE in the environment. Its scale must reach the
# library.
set(SELFDRIVEN_SCALE 3)

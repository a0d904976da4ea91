"""The cause of a failed build, found in its output as the compilers print it."""

from __future__ import annotations

from sparkbake.wheels import compile_errors

SCCACHE = 'sccache statistics: {"stats": {"compile_requests": 1, "cache_hits": {}}}'

NVCC = f"""\
  + sccache nvcc -O2 -c csrc/scale.cu -o build/temp/scale.o
  /build/src/csrc/scale.cu(10): error: identifier "undefined_symbol_from_patch" is undefined
            values[i] = undefined_symbol_from_patch(values[i]) * factor;
                        ^

  1 error detected in the compilation of "/build/src/csrc/scale.cu".
  Traceback (most recent call last):
  subprocess.CalledProcessError: Command '['nvcc']' returned non-zero exit status 2.
  error: subprocess-exited-with-error
ERROR: Failed to build one or more wheels
{SCCACHE}
"""

NINJA_GCC = """\
[12/40] Building CXX object CMakeFiles/_C.dir/csrc/ops.cpp.o
FAILED: CMakeFiles/_C.dir/csrc/ops.cpp.o
/usr/bin/c++ -DTORCH_EXTENSION_NAME=_C -O3 -c /build/src/csrc/ops.cpp -o ops.cpp.o
/build/src/csrc/ops.cpp: In function 'void scale()':
/build/src/csrc/ops.cpp:7:3: error: 'undefined_symbol' was not declared in this scope
    7 |   undefined_symbol();
      |   ^~~~~~~~~~~~~~~~
/build/src/csrc/ops.cpp:9:1: error: expected ';' before '}' token
ninja: build stopped: subcommand failed.
"""

CMAKE = """\
-- The CXX compiler identification is GNU 12.2.0
CMake Error at CMakeLists.txt:12 (message):
  Unsupported CUDA architecture 12.1a
  (TORCH_CUDA_ARCH_LIST)


-- Configuring incomplete, errors occurred!
"""


def test_nvccs_error_with_its_source_line_and_caret_in_the_trees_paths() -> None:
    assert compile_errors.failure_summary(NVCC) == ("the compiler's first error", [
        'csrc/scale.cu(10): error: identifier "undefined_symbol_from_patch" is undefined',
        "          values[i] = undefined_symbol_from_patch(values[i]) * factor;",
        "                      ^"])


def test_gccs_located_error_wins_over_ninjas_failed_line() -> None:
    assert compile_errors.first_error(NINJA_GCC) == [
        "csrc/ops.cpp:7:3: error: 'undefined_symbol' was not declared in this scope",
        "    7 |   undefined_symbol();",
        "      |   ^~~~~~~~~~~~~~~~"]


def test_a_cmake_error_without_a_compiler_error_is_shown_with_its_message() -> None:
    assert compile_errors.first_error(CMAKE) == [
        "CMake Error at CMakeLists.txt:12 (message):",
        "  Unsupported CUDA architecture 12.1a",
        "  (TORCH_CUDA_ARCH_LIST)"]


def test_a_ninja_failure_alone_is_shown_shortened() -> None:
    output = "FAILED: obj.o\n" + "x" * 500 + "\n"
    assert compile_errors.first_error(output) == ["FAILED: obj.o"]
    long_line = "a.cu(1): error: " + "y" * 500
    assert compile_errors.first_error(long_line) == [long_line[:compile_errors.WIDTH] + "..."]


def test_without_a_compiler_error_the_end_is_shown_without_sccaches_statistics() -> None:
    output = "\n".join(f"line {n}" for n in range(20)) + f"\n{SCCACHE}\n"
    heading, lines = compile_errors.failure_summary(output)
    assert heading == "the end of its output"
    assert lines == [f"line {n}" for n in range(12, 20)]


def test_warnings_are_not_errors() -> None:
    output = "csrc/a.cu(3): warning #177-D: variable was declared but never referenced\n"
    assert compile_errors.first_error(output) == []

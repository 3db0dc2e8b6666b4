"""Compiler output read as data."""

from harness.builds.compiler_log import parse_compiler_output


def test_compiler_output_without_location_noise_and_warnings():
    assert parse_compiler_output("ninja: build stopped: subcommand failed.\n") == []
    found = parse_compiler_output("x.cpp:3:1: warning: unused variable\n"
                                  "ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes)\n"
                                  "main.o: undefined reference to `foo()'\n")
    assert [d.one_line() for d in found] == [
        "error: Entry function 'k' uses too much shared data (0x10000 bytes)", "error: undefined reference to `foo()'"]


def test_a_library_log_line_in_the_build_output_is_no_compiler_error():
    """A build worker sees no GPU, and torch says so in its own log format while building."""
    log = ("ERROR: 2026-11-25 15:47:26 1:1 DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 100\n"
           "/b/k/main.cpp:4:57: error: 'custom_conv2d_cuda' was not declared in this scope\n")
    assert [d.message for d in parse_compiler_output(log)] == ["'custom_conv2d_cuda' was not declared in this scope"]


def test_the_first_error_does_not_depend_on_which_source_finished_compiling_first():
    """ninja compiles main.cpp and cuda.cu at once: the kernel source's error leads either way."""
    binding = "/b/k/main.cpp:4:5: error: 'conv2d_cuda' was not declared in this scope\n"
    kernel = "/b/k/cuda.cu(12): error: namespace \"torch::cuda\" has no member \"getCurrentCUDAStream\"\n"
    for log in (binding + kernel, kernel + binding):
        first = parse_compiler_output(log)[0]
        assert first.file == "cuda.cu" and "getCurrentCUDAStream" in first.message, log


def test_a_tool_stopped_by_a_signal_or_a_limit_is_told_from_a_compile_error():
    """Such a build is never cached as the code's outcome (builds/ahead.py): a rival had set a
    compiler's RLIMIT_FSIZE to 0, and an honest candidate's compile_error was cached."""
    from harness.builds.compiler_log import tool_stopped

    for stopped in ("c++: fatal error: Killed signal terminated program cc1plus",
                    "c++: internal compiler error: File size limit exceeded signal terminated program as",
                    "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
                    "/bin/sh: line 1: 1234 Killed                  c++ -c main.cpp"):
        assert tool_stopped(stopped), stopped
    assert not tool_stopped("main.cpp:4:5: error: 'custom_conv2d_cuda' was not declared in this scope")
    assert not tool_stopped("cuda.cu(119): error: namespace \"torch::cuda\" has no member \"getCurrentCUDAStream\"")

"""Compiler output read as data."""

from harness.builds.compiler_log import parse_compiler_output


def test_compiler_output_without_location_noise_and_warnings():
    assert parse_compiler_output("ninja: build stopped: subcommand failed.\n") == []
    found = parse_compiler_output("x.cpp:3:1: warning: unused variable\n"
                                  "ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes)\n"
                                  "main.o: undefined reference to `foo()'\n")
    assert [d.one_line() for d in found] == [
        "error: Entry function 'k' uses too much shared data (0x10000 bytes)", "error: undefined reference to `foo()'"]

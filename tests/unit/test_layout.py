"""The package's structure, held: a GPU run imports nothing of the CPU's integrity machinery
(harness/cpu/), which one place alone chooses (schedule/devices.py), and only for a CPU run."""

import ast
import subprocess
import sys
from pathlib import Path

import harness

PACKAGE = Path(harness.__file__).parent
CPU = PACKAGE / "cpu"
# Where the CPU's package may be named: the one place a run's device is chosen, inside the function
# that chooses it; and the public flag vocabulary, which names every device's flags.
CHOOSER, VOCABULARY = PACKAGE / "schedule" / "devices.py", PACKAGE / "flags.py"


def imports_of_cpu(path: Path) -> list[tuple[int, str | None]]:
    """(line, enclosing function or None) of each import of harness.cpu in the module at `path`."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inside = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - child.level + 1] if child.level else []
                names = [".".join([*base, child.module or ""]).strip(".")]
                names += [f"{names[0]}.{alias.name}" for alias in child.names]
            if any(name == "harness.cpu" or name.startswith("harness.cpu.") for name in names):
                found.append((child.lineno, function))
            visit(child, inside)

    visit(tree, None)
    return found


def test_nothing_outside_the_cpu_package_imports_it_but_the_device_chooser_in_its_function():
    outside = [path for path in PACKAGE.rglob("*.py") if CPU not in path.parents]
    found = {path: imports_of_cpu(path) for path in outside}
    assert not {path: lines for path, lines in found.items() if lines and path not in (CHOOSER, VOCABULARY)}
    assert found[CHOOSER] and all(function == "device_for" for _, function in found[CHOOSER])
    assert imports_of_cpu(CPU / "device.py")  # the check sees relative imports (`from .checks...`) too


def test_a_gpu_run_loads_no_module_of_the_cpu_package():
    """Everything a GPU run imports, its device chosen and its checks found: not one module of
    harness/cpu/ is loaded (a CPU run's choice loads them)."""
    program = (
        "import sys\n"
        "import harness.api, harness.cli, harness.run, harness.pytest_plugin, harness.schedule.local, harness.problem_check\n"
        "from harness.judge import diagnose\n"
        "from harness.schedule.devices import device_for\n"
        "device = device_for('cuda', 'token')\n"
        "assert device.checks and device.name == 'cuda'\n"
        "print(sorted(name for name in sys.modules if name.startswith('harness.cpu')))\n"
        "device_for('cpu', 'token')\n"
        "print(sorted(name for name in sys.modules if name.startswith('harness.cpu')))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    gpu_run, cpu_run = done.stdout.splitlines()[-2:]
    assert gpu_run == "[]"
    assert "harness.cpu.sampling" in cpu_run and "harness.cpu.quiet" in cpu_run

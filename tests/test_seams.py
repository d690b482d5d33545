"""Seams the layers rely on, checked on the source and on real processes: library code leaves the
process environment alone, benchmarks call the product (never the tests), and the policy server is
spawned through its own module entry."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from evolvable.errors import EvolvableError
from evolvable.policy_server.launcher import policy_server

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "evolvable"


def _environ_writes(tree: ast.AST) -> list[int]:
    """Lines that assign, update or delete `os.environ` entries, or call `os.putenv`."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            target = ast.unparse(node.value)
            if target.endswith("environ"):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("os.putenv", "os.unsetenv") or (
                name.split(".")[-2:-1] == ["environ"] and name.rsplit(".", 1)[-1] in ("setdefault", "update", "pop")
            ):
                lines.append(node.lineno)
    return lines


def _process_entry_lines(tree: ast.Module) -> set[int]:
    """Lines of `main()` in a module run as a process (`if __name__ == "__main__": main()`): an entry point."""
    runs_as_main = any(
        isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'" for node in tree.body
    )
    mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"] if runs_as_main else []
    return {line for fn in mains for line in range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)}


def test_only_entry_points_write_the_process_environment() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC)
        if relative.parts[0] == "cli" or relative.name == "__main__.py":
            continue  # entry points may set process-wide defaults before heavy imports
        tree = ast.parse(path.read_text())
        entry = _process_entry_lines(tree)
        offenders += [f"{relative}:{line}" for line in _environ_writes(tree) if line not in entry]
    assert offenders == [], f"library code writes os.environ (pass env to subprocesses instead): {offenders}"


def test_the_environment_check_finds_a_write() -> None:
    code = "import os\nos.environ['A'] = '1'\nos.environ.setdefault('B', '2')\ndel os.environ['A']\n"
    assert _environ_writes(ast.parse(code)) == [2, 3, 4]


def test_only_the_main_of_a_module_run_as_a_process_counts_as_an_entry_point() -> None:
    runs = "import os\ndef main():\n    os.environ['A'] = '1'\nif __name__ == '__main__':\n    main()\n"
    library = "import os\ndef main():\n    os.environ['A'] = '1'\n"
    assert _process_entry_lines(ast.parse(runs)) == {2, 3}
    assert _process_entry_lines(ast.parse(library)) == set()


def _test_imports(tree: ast.AST) -> list[int]:
    """Lines that import `tests` or put a path through the tests folder on sys.path (insert/append)."""
    lines = []
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(n == "tests" or n.startswith("tests.") for n in names) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("insert", "append")
            and ast.unparse(node.func.value) == "sys.path"
            and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) and "tests" in c.value.split("/")
                for arg in node.args
                for c in ast.walk(arg)
            )
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_benchmarks_do_not_import_the_tests() -> None:
    offenders = [
        f"{path.relative_to(ROOT / 'benchmarks')}:{line}"
        for path in sorted((ROOT / "benchmarks").rglob("*.py"))
        for line in _test_imports(ast.parse(path.read_text()))
    ]
    assert offenders == []


def test_the_benchmark_guard_finds_an_import_and_a_path_insert() -> None:
    code = (
        "import sys\nimport tests.support\nfrom tests import x\n"
        'sys.path.insert(0, str(ROOT / "tests" / "governance"))\nsys.path.append("tests/governance")\n'
        'sys.path.insert(0, str(ROOT / "benchmarks"))\n'
    )
    assert _test_imports(ast.parse(code)) == [2, 3, 4, 5]


def test_the_policy_server_module_entry_refuses_bad_arguments_with_a_message() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "evolvable.policy_server", "--lora", "no-equals-sign"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--lora expects NAME=PATH" in bad.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "evolvable.policy_server", "--max-batch", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert usage.returncode == 2 and "--max-batch must be >= 1" in usage.stderr


def test_the_launcher_spawns_the_module_entry_and_reports_its_exit(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with (
        pytest.raises(EvolvableError, match="exited with code 2"),
        policy_server(log_path=log, startup_s=120, extra_args=["--lora", "broken"]),
    ):
        pass
    assert "error: --lora expects NAME=PATH, got 'broken'" in log.read_text()

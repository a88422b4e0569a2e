from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.strip().splitlines() if line.strip() and not line.startswith("#")]


def test_readme_starts_with_exactly_two_setup_commands():
    commands = setup_commands()
    assert len(commands) == 2
    assert commands[0].endswith("kernelkit demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_word_for_word():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup_commands()[1] in [line.strip() for line in ci]


def test_ci_runs_the_readme_first_command_after_the_tests_and_describes_the_machine_first():
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    demo = setup_commands()[0].split("&&")[-1].strip()  # kernelkit demo
    tests = ci.index(setup_commands()[1])
    assert any(line.startswith(demo) for line in ci[tests + 1:])
    assert any("/proc/cpuinfo" in line for line in ci[:tests]) and any("cache" in line for line in ci[:tests])


def test_every_kernelkit_environment_variable_the_code_reads_is_in_the_readme():
    import re

    names = set()
    for path in (ROOT / "src" / "kernelkit").rglob("*.py"):
        names |= set(re.findall(r'"(KERNELKIT_[A-Z_]+)"', path.read_text()))
    readme = (ROOT / "README.md").read_text()
    assert names and not [n for n in sorted(names) if f"`{n}`" not in readme]

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

"""scripts/test, the README's test command, installs what the tests need — system packages with sudo apt-get.
Run here with a fake sudo, apt-get, id and Python first on a PATH of their own (nothing is installed, no test
runs): it must say which packages it installs with sudo and why before it runs sudo, and HARNESS_TEST_APT=0
must skip that."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
FAKE = {
    # each fake says on stdout that it ran (so the order against the script's own lines shows) and logs its argv
    "sudo": 'echo "fake-sudo: $*"; echo "sudo $*" >> "$FAKE_LOG"; exec "$@"',
    "apt-get": 'echo "fake-apt-get: $*"; echo "apt-get $*" >> "$FAKE_LOG"',
    "id": '[ "$1" = -u ] && echo 1000 || echo "uid=1000(user)"',
    "python": 'echo "python $*" >> "$FAKE_LOG"',  # pip install, pytest: nothing done, exit 0
}
REAL = ("dirname", "mktemp", "cat", "grep", "rm")  # what the script uses besides the fakes and bash's builtins


def run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in FAKE.items():
        (bin_dir / name).write_text(f"#!{shutil.which('sh')}\n{body}\n")
        (bin_dir / name).chmod(0o755)
    for name in REAL:
        if not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(shutil.which(name))
    log = tmp_path / "calls.log"
    log.write_text("")
    p = subprocess.run([shutil.which("bash"), str(PROJECT / "scripts" / "test"), "-q"], capture_output=True,
                       text=True, timeout=60, env={"PATH": str(bin_dir), "PYTHON": str(bin_dir / "python"),
                                                   "FAKE_LOG": str(log), "HOME": str(tmp_path), **env})
    return p, log.read_text().splitlines()


def installed(calls: list[str]) -> list[str]:
    """The packages the fake apt-get was asked to install."""
    line = next(c for c in calls if c.startswith("apt-get") and " install " in c)
    return [w for w in line.split()[1:] if not w.startswith("-") and w != "install"]


def test_it_says_what_it_installs_with_sudo_and_why_before_running_sudo(tmp_path):
    p, calls = run_script(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    packages = installed(calls)
    assert "git" in packages  # not on the fake PATH: needed
    out = p.stdout
    first_sudo = out.index("fake-sudo:")
    said = out[:first_sudo]
    assert "sudo apt-get" in said and "HARNESS_TEST_APT=0" in said, said
    for package in packages:  # each named with what needs it, before sudo ran
        line = next((ln for ln in said.splitlines() if ln.split()[:1] == [package]), None)
        assert line is not None and len(line.split()) > 1, (package, said)
    assert [c for c in calls if c.startswith("sudo ")] == ["sudo apt-get update -qq", "sudo apt-get install -y -qq "
                                                           "--no-install-recommends " + " ".join(packages)]


def test_harness_test_apt_0_installs_nothing_and_names_what_is_missing(tmp_path):
    p, calls = run_script(tmp_path, HARNESS_TEST_APT="0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert not [c for c in calls if c.startswith(("sudo", "apt-get"))], calls
    assert "fake-sudo" not in p.stdout and "HARNESS_TEST_APT=0" in p.stdout
    assert "git" in p.stdout.split()
    assert any(c.startswith("python -m pytest") for c in calls)  # the tests still run

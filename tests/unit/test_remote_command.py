"""Nothing depends on the remote login shell's quoting: the command an SSH channel executes means the
same argv under sh, bash, zsh, csh, tcsh and fish (each run here for real when installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from harness.hosts.ssh import remote_command

SHELLS = ["sh", "bash", "zsh", "csh", "tcsh", "fish"]
NASTY = ["it's", 'say "hi"', "a\\b", "!!", "$HOME", "`id`", "*", "~", "; rm -rf /", "line\nbreak", "tab\there",
         "ünïcødé", "", "--", "{a,b}", "(x)", "[0-9]", "%1", "a=b", "#no comment"]
ECHO = "import json,sys;print(json.dumps(sys.argv[1:]))"


@pytest.mark.parametrize("shell", SHELLS)
def test_any_argv_reaches_the_program_unchanged_through_the_login_shell(shell):
    exe = shutil.which(shell)
    if exe is None:
        pytest.skip(f"{shell} is not installed (scripts/test installs tcsh, zsh and fish)")
    # A multi-line program, as the harness sends (the old quoting broke tcsh with "Unmatched '''").
    program = "import json, sys\n\nprint(json.dumps(sys.argv[1:]))\n"
    for argv in ([sys.executable, "-c", ECHO, *NASTY], [sys.executable, "-c", program, *NASTY]):
        cmd = remote_command(sys.executable, argv)
        p = subprocess.run([exe, "-c", cmd], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout.strip().splitlines()[-1]) == NASTY


def test_the_program_keeps_its_standard_input():
    cmd = remote_command(sys.executable, [sys.executable, "-c", "import sys;print(sys.stdin.read().upper())"])
    p = subprocess.run(["sh", "-c", cmd], input="spec line\n", capture_output=True, text=True, timeout=30)
    assert p.stdout.strip() == "SPEC LINE"


@pytest.mark.parametrize("python", ["/opt/it's/python", "py\\thon", "python!", "py\nthon"])
def test_a_python_path_no_shell_can_carry_is_refused(python):
    with pytest.raises(ValueError, match="quote, backslash"):
        remote_command(python, [python, "-c", "pass"])

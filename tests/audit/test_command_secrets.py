"""Secrets in the command lines the run-time audit reads back, redacted.

The report names the processes it attributes a write to by their command line, read from
``/proc/PID/cmdline``. A real child process carries the secrets in its argv (``argv[0]`` is set
to ``worker``, as ``exec -a`` would, so that the expected lines are literal); the audit's reader
must show every ``NAME=secret`` word with a secret's name, and the value of ``-p``,
``--password`` and ``--token``, as ``***``.
"""

from __future__ import annotations

import subprocess
import sys

import _cacheroot_audit as audit
import pytest

from cacheroot.envs._audit_report import _command

#: What the child runs: says it is up, then sleeps until it is killed (no space, so that the
#: line shows it as is).
SLEEP = "print(1,flush=True);__import__('time').sleep(60)"
HEAD = f"worker -c {SLEEP}"


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (
            [
                "HF_TOKEN=hf_s3cr3t1",
                "HUGGING_FACE_HUB_TOKEN=hf_s3cr3t2",
                "AWS_SECRET_ACCESS_KEY=s3cr3t3",
                "AWS_SESSION_TOKEN=s3cr3t4",
                "GITHUB_TOKEN=ghp_s3cr3t5",
            ],
            (
                f"{HEAD} HF_TOKEN=*** HUGGING_FACE_HUB_TOKEN=*** AWS_SECRET_ACCESS_KEY=*** "
                "AWS_SESSION_TOKEN=*** GITHUB_TOKEN=***"
            ),
        ),
        (
            [
                "OPENAI_API_KEY=sk-s3cr3t1",
                "SSH_PRIVATE_KEY=s3cr3t2",
                "DB_PASSWORD=s3cr3t3",
                "MYSQL_PWD=s3cr3t4",
                "PATH=/usr/bin",
            ],
            (
                f"{HEAD} OPENAI_API_KEY=*** SSH_PRIVATE_KEY=*** DB_PASSWORD=*** MYSQL_PWD=*** "
                "PATH=/usr/bin"
            ),
        ),
        (
            ["-p", "s3cr3t1", "--password", "s3cr3t2", "--password=s3cr3t3"],
            f"{HEAD} -p *** --password *** --password=***",
        ),
        (
            ["--token", "s3cr3t1", "-e", "APP_SECRET=s3cr3t2", "--env=HF_TOKEN=s3cr3t3"],
            f"{HEAD} --token *** -e APP_SECRET=*** --env=HF_TOKEN=***",
        ),
        (
            ["MODE=fast", "token=s3cr3t1", "WANDB_API_KEY=s3cr3t2", "-v", "out.txt"],
            f"{HEAD} MODE=fast token=*** WANDB_API_KEY=*** -v out.txt",
        ),
    ],
    ids=["hub-aws-github", "keys-passwords", "password-options", "token-and-env", "kept"],
)
def test_a_live_processs_command_line_is_read_back_redacted(
    words: list[str], expected: str
) -> None:
    child = subprocess.Popen(
        ["worker", "-c", SLEEP, *words], executable=sys.executable, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"1\n"  # running: its command line is in place
        shown = _command(child.pid)
    finally:
        child.kill()
        child.communicate()
    assert shown == expected
    assert "s3cr3t" not in shown


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # -p is no password for these: a flag (the next word is a path) or pytest's plugin.
        (["mkdir", "-p", "/tmp/a/b"], "mkdir -p /tmp/a/b"),
        (
            ["/usr/bin/python3", "-m", "pytest", "-p", "no:xdist"],
            "/usr/bin/python3 -m pytest -p no:xdist",
        ),
        (["sshpass", "-p", "s3cr3t1", "ssh", "host"], "sshpass -p *** ssh host"),
        # A shell line: each command is judged by its own program.
        (
            "mkdir -p /tmp/a && sshpass -p s3cr3t1 ssh host",
            "mkdir -p /tmp/a && sshpass -p *** ssh host",
        ),
        (
            "python3 -m pytest -p no:xdist; sshpass -p s3cr3t1 ssh host",
            "python3 -m pytest -p no:xdist; sshpass -p *** ssh host",
        ),
        (
            "HF_TOKEN=s3cr3t1 python -m pytest -p no:xdist",
            "HF_TOKEN=*** python -m pytest -p no:xdist",
        ),
        # The MySQL clients take the password attached to -p; other programs' -pVALUE is not
        # one (docker's -p8080:80 is a port mapping).
        (["mysql", "-uroot", "-ps3cr3t1", "db"], "mysql -uroot -p*** db"),
        ("mysqldump -ps3cr3t1 db > dump.sql", "mysqldump -p*** db > dump.sql"),
        (["docker", "run", "-p8080:80", "img"], "docker run -p8080:80 img"),
    ],
)
def test_which_programs_dash_p_is_a_password(command: list[str] | str, expected: str) -> None:
    assert audit.redact_command(command) == expected

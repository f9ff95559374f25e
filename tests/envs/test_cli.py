"""The ``cacheroot`` command with only some of the cacheroot distributions installed."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from cacheroot.envs._cli import GROUP, main

#: The real entry points of cacheroot-envs alone, as in an environment that installed only it.
ENVS_ONLY = [ep for ep in entry_points(group=GROUP) if ep.dist and ep.dist.name == "cacheroot-envs"]


@pytest.mark.parametrize(
    ("command", "dist", "folder"),
    [
        ("fetch", "cacheroot-fetch", "packages/fetch"),
        ("warm", "cacheroot-fetch", "packages/fetch"),
        ("cache", "cacheroot-fetch", "packages/fetch"),
        ("tier", "cacheroot-fetch", "packages/fetch"),
        ("hook", "cacheroot-sitecustomize", "sitecustomize"),
    ],
)
def test_a_subcommand_of_a_missing_distribution_says_how_to_install_it(
    command: str, dist: str, folder: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "x"], entries=ENVS_ONLY)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(
        f"cacheroot: error: '{command}' is a subcommand of the {dist} distribution, which is "
        "not installed (the subcommands installed here: audit, doctor, env); in a clone of the "
        "cacheroot repository, `pip install .` at its root installs every cacheroot "
        f"distribution, `pip install ./{folder}` this one alone\n"
    )


def test_an_unknown_subcommand_keeps_argparse_s_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["fecth"], entries=ENVS_ONLY)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'fecth'" in err  # not one of ours: no distribution to name
    assert "distribution" not in err


def test_an_installed_subcommand_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"], entries=ENVS_ONLY) == 0
    assert "HF_HOME" in capsys.readouterr().out

from __future__ import annotations

import os


def test_models_are_found() -> None:
    os.environ["HF_HOME"] = "/tmp/hf"  # noqa: S108

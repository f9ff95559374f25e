"""An origin that never answers: the deadline's message says so, instead of "too slow"."""

from __future__ import annotations

import re
import socket
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import DownloadError, Fetcher

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A URL on a port that is bound but never listens: every connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/x.bin"


def test_one_refused_attempt_says_no_answer_came(refused_url: str) -> None:
    f = Fetcher(deadline=1.0, retries=5, backoff=10.0)  # the first wait (5 s at least) is past it
    with pytest.raises(DownloadError) as info:
        f.fetch(refused_url)
    assert str(info.value) == (
        f"gave up on {refused_url} after 1 attempt, which got no answer from the origin (the "
        "last: ConnectionError: Connection refused); another would come after the deadline of "
        "1 s. Check that the origin is up and that the URL's host and port are right, or fetch "
        "it from elsewhere; to wait longer for it to come up, raise the deadline "
        "(Fetcher(deadline=SECONDS), None for none)"
    )
    assert info.value.status is None
    assert not f.path(refused_url).exists()


def test_refused_attempts_are_counted(refused_url: str) -> None:
    f = Fetcher(deadline=0.5, retries=10_000, backoff=0.01, backoff_max=0.01)
    with pytest.raises(DownloadError) as info:
        f.fetch(refused_url)
    found = re.fullmatch(
        rf"gave up on {re.escape(refused_url)} after (\d+) attempts, none of which got an answer "
        r"from the origin \(the last: ConnectionError: Connection refused\); (another would come "
        r"after the deadline of 0\.5 s|the deadline of 0\.5 s passed)\. Check that the origin is "
        r"up .*",
        str(info.value),
    )
    assert found is not None, str(info.value)
    assert int(found.group(1)) >= 2
    assert "too slow" not in str(info.value)


def test_retries_spent_on_one_attempt_say_1_attempt(refused_url: str) -> None:
    with pytest.raises(DownloadError) as info:
        Fetcher(retries=0).fetch(refused_url)
    assert str(info.value) == (
        f"giving up on {refused_url} after 1 attempt: ConnectionError: Connection refused; the "
        "origin may be down or rate-limiting: retry later, or warm the cache from a machine that "
        "can reach it"
    )

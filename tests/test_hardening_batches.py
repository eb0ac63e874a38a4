"""A batch whose creation reply is lost (a proxy's 502 after the provider created it) is found
again and used, never created (and billed) a second time; every batch created is recorded."""

from __future__ import annotations

import pytest

from grandrounds.store import Store
from grandrounds.testing.batch import BatchServer
from tests.test_batching import WIRES, ask_all, echo, make_provider, requests_for


@pytest.mark.parametrize("lost", [1, 2])
@pytest.mark.parametrize("wire", WIRES)
def test_a_batch_whose_creation_reply_was_lost_is_created_once(wire, lost, tmp_path):
    with BatchServer(echo) as srv, Store(tmp_path / "s.db") as st:
        srv.lost_creates = lost
        p = make_provider(wire, srv)
        reqs = requests_for(p, 5)
        out, ex = ask_all(st, p, reqs)
        assert [r.text for r in out] == [f"reply to question {i}" for i in range(5)], (
            "the run completes"
        )
        assert len(srv.stats.submissions) == 1, (
            f"created {len(srv.stats.submissions)} batches for one submission"
        )
        assert max(srv.stats.submitted.values()) == 1
        if wire == "openai":
            assert srv.stats.uploads == 1, "the input file is uploaded once per submission"
        [stored] = st.batches()
        assert (
            stored.batch_id == srv.stats.submissions[0].batch_id and stored.collected_at is not None
        )
    assert (
        ex.hub.stats.batches == 1
        and ex.hub.stats.found_again == 1
        and ex.hub.stats.submit_failures == 1
    )
    assert (
        "1 submitted (5 requests, largest 5), 1 of them found again after a lost reply (not created twice)"
        in ex.hub.stats.line("x")
    )


def test_openai_batches_carry_a_marker_and_are_matched_by_their_file(tmp_path):
    """Two submissions in a row, the second's reply lost: it is matched by its own input file
    and marker, never taken for the first batch."""
    with BatchServer(echo) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider("openai", srv)
        out, _ = ask_all(st, p, requests_for(p, 3))
        srv.lost_creates = 1
        p = make_provider("openai", srv)
        out2, ex = ask_all(st, p, requests_for(p, 3, start=10))
        assert all(r.ok for r in out + out2) and len(srv.stats.submissions) == 2
        first, second = (srv._batches[s.batch_id] for s in srv.stats.submissions)
        assert first.metadata["grandrounds_submission"] != second.metadata["grandrounds_submission"]
        assert [b.batch_id for b in st.batches()] == [s.batch_id for s in srv.stats.submissions]
    assert ex.hub.stats.found_again == 1


def test_anthropic_takes_no_batch_the_store_already_knows(tmp_path):
    """Message batches carry no marker: one of the same size the store already has is not taken
    for the lost one (which is found among the batches it does not know)."""
    with BatchServer(echo) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider("anthropic", srv)
        ask_all(st, p, requests_for(p, 4))
        srv.lost_creates = 1
        p = make_provider("anthropic", srv)
        reqs = requests_for(p, 4, start=20)
        out, ex = ask_all(st, p, reqs)
        assert [r.text for r in out] == [f"reply to question {i}" for i in range(20, 24)]
        assert len(srv.stats.submissions) == 2 and ex.hub.stats.found_again == 1
        assert st.batches()[-1].batch_id == srv.stats.submissions[1].batch_id

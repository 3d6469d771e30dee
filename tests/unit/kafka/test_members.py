"""Worker client ids (memstream/kafka/members.py) name their process."""

from __future__ import annotations

from memstream.kafka.members import owner_of, worker_client_id


def test_worker_client_ids_name_their_process() -> None:
    cid = worker_client_id("memstream-search", pid=4711, host="box-1.local")
    assert cid == "memstream-search.pid4711@box-1.local"
    assert owner_of(cid) == (4711, "box-1.local")
    assert owner_of("memstream") is None and owner_of("aiokafka-0.14.0") is None

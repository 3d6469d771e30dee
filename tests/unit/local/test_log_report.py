"""What ``up`` and ``status`` say of a broker holding less than was seen
(memstream/local/log_report.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from memstream.kafka.log_ends import Ledger, compare
from memstream.local.log_report import describe, status_lines

AT = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def test_up_and_status_say_it_plainly() -> None:
    seen = Ledger(AT, {"c": {2: 9}}, {})
    lines = describe(compare(seen, {"c": {2: 4}}))
    assert lines[0] == "the broker lost 5 record(s) memstream had seen:"
    assert "the broker lost this write" in lines[-1]
    ok = status_lines({"lost": [], "checked_against": AT.isoformat(), "last_report": None})
    assert ok == ["intact (holds all memstream saw by 2026-11-26T09:00:00Z)"]
    report = {"found_at": AT.isoformat(), "by": "up", "note": None,
              "losses": [{"seen": 9, "now": 4}]}
    line = status_lines({"lost": [], "checked_against": None, "last_report": report})[0]
    assert "last restart problem 2026-11-26T09:00:00Z (up): 5 record(s) lost" in line

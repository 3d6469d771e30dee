"""One exit code per kind of error (docs/cli.md, Errors): 2 for what the user gave, an id the
cube does not hold among it; 1 for the service or the machine."""

from __future__ import annotations

import click
import pytest

from memstream.cli.errors import USAGE_EXIT, one_line
from memstream.client.client import MemoryServiceError
from memstream.history.indexed import AmbiguousId, IndexBehind
from memstream.history.provenance import NodeNotFound


@pytest.mark.parametrize(("error", "code"), [
    (NodeNotFound("no memory no-such-id in cube 'alice'"), USAGE_EXIT),
    (AmbiguousId("id prefix 'abcdefgh' matches several memories of cube 'alice': …"),
     USAGE_EXIT),
    (IndexBehind("the provenance index is 12 records behind on memory.updates[0] after 60s; "
                 "is a worker running?"), 1),
    (MemoryServiceError("AccessDenied", "user 'bob' may not read cube 'alice'"), 1),
    (RuntimeError("no broker runs in /tmp/x/.memstream"), 1),
])
def test_each_kind_of_error_exits_with_its_code(error: Exception, code: int) -> None:
    raised = one_line(error)
    assert isinstance(raised, click.ClickException)
    assert raised.exit_code == code
    shown = error.message if isinstance(error, MemoryServiceError) else str(error)
    assert raised.format_message() == shown


@pytest.mark.parametrize(("env", "line"), [
    ({"search": {"overrides": {"fusion.turn_k": 0}}},
     "search.overrides: fusion.turn_k: Input should be greater than or equal to 1 (got 0)"),
    ({"search": {"turn_rrf_k": 5}},
     "search.turn_rrf_k is now the recipe field fusion.turn_k: set search.overrides"),
])
def test_a_bad_search_setting_is_one_line_naming_the_field_once(env: dict[str, object],
                                                                line: str) -> None:
    from pydantic import ValidationError

    from memstream.cli.errors import validation_line
    from memstream.topics.settings import Settings

    with pytest.raises(ValidationError) as caught:
        Settings(**env)  # type: ignore[arg-type]
    shown = validation_line(caught.value, "settings")
    assert shown.startswith(f"settings: {line}")
    assert "Value error" not in shown and "\n" not in shown

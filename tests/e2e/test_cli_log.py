"""`memstream history / as-of / explain / freeze / unfreeze / sweep / backup / restore`, run as
separate processes against a worker on the test's broker and stores."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from tests.support.pipeline import Pipeline

MEMSTREAM = [sys.executable, "-m", "memstream"]


async def cli(p: Pipeline, *args: str) -> tuple[int, str, str]:
    """Run the CLI with the test's settings (broker, topic prefix, consumer group)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env.update({
        "COLUMNS": "200",
        "MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS": p.bootstrap,
        "MEMSTREAM_KAFKA__TOPIC_PREFIX": p.settings.kafka.topic_prefix,
        "MEMSTREAM_KAFKA__PARTITIONS": str(p.settings.kafka.partitions),
        "MEMSTREAM_APP_ID": p.settings.app_id,
        "MEMSTREAM_DATA_DIR": str(p.settings.data_dir / "cli"),
    })
    proc = await asyncio.create_subprocess_exec(
        *MEMSTREAM, *args, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_history_explain_freeze_as_of_backup_restore(pipeline: Pipeline,
                                                            tmp_path: Path) -> None:
    p = pipeline
    token = await p.client.add_messages("carol", [
        {"role": "user", "content": "I keep bees in my garden in Ghent."}], session_id="s1")
    await p.client.wait_applied(token, timeout=120)
    (bees,) = [n for n in await p.deps.store.graph.all_of_type("carol", "UserMemory")
               + await p.deps.store.graph.all_of_type("carol", "LongTermMemory")
               if "bees" in n.memory]

    code, out, err = await cli(p, "freeze", bees.id, "--user", "carol", "--reason", "audit")
    assert code == 0, err
    assert "froze 1 memory in cube 'carol'" in out
    code, out, err = await cli(p, "freeze", "no-such-id", "--user", "carol")
    assert code == 2 and "no memory no-such-id in cube 'carol'; nothing frozen" in err
    assert "Traceback" not in err

    code, out, err = await cli(p, "history", bees.id)
    assert code == 0, err
    assert "history of " + bees.id in out
    assert " added " in out and " frozen " in out and "audit" in out
    assert "memory.items" in out and "memory.commands: freeze" in out

    code, out, err = await cli(p, "explain", bees.id)
    assert code == 0, err
    assert "I keep bees in my garden in Ghent." in out
    assert "← message" in out and "said in:" in out

    code, out, err = await cli(p, "as-of", datetime.now(UTC).isoformat(), "--user", "carol")
    assert code == 0, err
    assert "bees" in out and "activated (frozen)" in out and "EpisodicMemory" in out
    code, out, err = await cli(p, "as-of", "2001-01-01", "--user", "carol")
    assert code == 0 and "cube 'carol': no memories held at 2001-01-01" in out
    # in the conversation's time: what held then, with since when
    code, out, err = await cli(p, "as-of", datetime.now(UTC).isoformat(), "--valid",
                               "--user", "carol")
    assert code == 0, err
    assert "conversation time" in out and "bees" in out and "since 20" in out
    code, out, err = await cli(p, "as-of", "2001-01-01", "--valid", "--user", "carol")
    assert code == 0 and "no memories held true at 2001-01-01" in out
    code, out, err = await cli(p, "as-of", "yesterday", "--user", "carol")
    assert code != 0 and "not an ISO 8601 time" in err

    code, out, err = await cli(p, "unfreeze", bees.id, "--user", "carol")
    assert code == 0 and "unfroze 1 memory" in out, err
    code, out, err = await cli(p, "sweep", "--user", "carol")
    assert code == 0 and "swept cube 'carol'" in out, err  # nothing unused yet: no change
    node = await p.deps.store.graph.get_node("carol", bees.id)
    assert node is not None and node.metadata.status == "activated" and not node.metadata.frozen

    folder = tmp_path / "backups"
    code, out, err = await cli(p, "backup", str(folder))
    assert code == 0, err
    assert "backed up 1 cube" in out and "carol" in out
    before = await p.deps.store.graph.export_cube("carol")
    await p.deps.store.clear_cube("carol")  # lost
    code, out, err = await cli(p, "restore", str(folder))
    assert code == 0, err
    assert "restored cube 'carol'" in out
    after = await p.deps.store.graph.export_cube("carol")
    assert sorted((n.id, n.memory) for n in after.nodes) == sorted(
        (n.id, n.memory) for n in before.nodes)
    code, out, err = await cli(p, "restore", str(tmp_path / "nothing-here"))
    assert code != 0 and "Traceback" not in err

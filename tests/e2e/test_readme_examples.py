"""The README's Python examples, extracted and run as written (each a whole script) against a
real pipeline: a user who copies one gets what the README says, and every loop ends."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.cli import pipeline_env
from tests.support.pipeline import Pipeline

README = Path(__file__).parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


async def run_script(code: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    import asyncio
    import sys

    script = cwd / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_every_python_example_in_the_readme_runs_as_written(pipeline: Pipeline,
                                                                  tmp_path: Path) -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2
    env = pipeline_env(pipeline)
    outputs = []
    for code in blocks:
        code_, out, err = await run_script(code, env, tmp_path)
        assert code_ == 0, f"{code}\n---\n{err[-3000:]}"
        assert "Traceback" not in err
        outputs.append(out)
    first, second = outputs[0], outputs[1]
    assert "allergic to shellfish" in first  # the search saw the write it waited for
    assert re.search(r"^added \S+$", first, re.MULTILINE)  # the updates loop ran and ended
    assert second.count("an answer to") == 2

"""``memstream ui`` in headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium): a seeded cube's topic → concept → fact tree, a search, a node's edges, history and
sources, and a live update; the screenshot is kept next to the test's files."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from memstream.sinks.graph.factory import create_graph_store
from memstream.topics.events import ExtractedMemory
from memstream.topics.models import SourceRef
from memstream.topics.registry import MEMORY_ITEMS
from memstream.ui.server import UIServer
from tests.e2e.test_optimizer import T0, settle
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

SUBJECTS = json.loads((Path(__file__).parents[1] / "data" / "three_subjects.json")
                      .read_text(encoding="utf-8"))["subjects"]
CUBE = "ui-cube"


def chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:  # CI installs them (.ci/run); never skip silently
        pytest.fail("headless Chromium is needed: apt-get install -y chromium chromium-driver")
    return browser, driver


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    binary, driver_path = chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest_asyncio.fixture
async def seeded(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                 ) -> AsyncIterator[Pipeline]:
    """Two subjects of facts, reorganized into a tree by the optimizer (rules mode)."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 memory={"conflict_detection": False})
    async for p in run_pipeline(settings):
        token = None
        n = 0
        for subject in ("food", *[s for s in SUBJECTS if s != "food"][:1]):
            for text in SUBJECTS[subject][:8]:
                n += 1
                token = await p.client.publish(MEMORY_ITEMS, ExtractedMemory(
                    user_id=CUBE, memory=text, occurred_at=T0 + timedelta(minutes=n), index=n,
                    session_id="s1", sources=(SourceRef(kind="message", message_id=f"m{n}",
                                                        role="user"),)))
        assert token is not None
        await p.client.wait_applied(token, timeout=120)
        await settle(p, CUBE)
        yield p


async def test_the_page_shows_the_tree_searches_and_opens_a_node(
    seeded: Pipeline, browser: webdriver.Chrome, tmp_path: Path,
) -> None:
    assert seeded.settings.graph.uri is not None
    graph = create_graph_store(seeded.settings, seeded.settings.graph.uri)
    server = UIServer(seeded.settings, seeded.client, graph, CUBE, CUBE)
    url = await server.start("127.0.0.1", 0)
    concepts = [n for n in await seeded.deps.store.graph.all_of_type(CUBE, "LongTermMemory")
                if n.metadata.hierarchy_level == "concept"]
    assert concepts, "the optimizer wrote summary nodes"
    try:
        shot = tmp_path / "memstream-ui.png"
        seen = await asyncio.to_thread(drive_page, browser, url, shot)
        # a live update: a memory added while the page is open appears in the tree
        await seeded.client.add_memories(CUBE, ["The user adopted a grey cat called Pixel."])
        live = await asyncio.to_thread(wait_for_text, browser, "#tree", "Pixel", 60)
    finally:
        await server.stop()
        await graph.close()
    assert seen["tree_visible"] and seen["tree_in_view"] and seen["concepts"] >= len(concepts) > 0
    assert seen["facts_under_concepts"] >= 2  # facts nested under their concept
    assert "lentil" in seen["first_result"].lower()
    assert seen["title"] and "lentil" in seen["memory"].lower()
    assert seen["history"] and "added" in seen["history"]
    assert seen["edges"] >= 1 and seen["sources"] >= 1
    assert live
    assert shot.stat().st_size > 10_000  # a real picture of the page


def wait_for_text(driver: webdriver.Chrome, selector: str, text: str, timeout: float) -> bool:
    WebDriverWait(driver, timeout).until(
        ec.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text))
    return True


def drive_page(driver: webdriver.Chrome, url: str, shot: Path) -> dict[str, Any]:
    wait = WebDriverWait(driver, 60)
    driver.get(url)
    wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, "#tree a.node[data-level='concept']")))
    tree = driver.find_element(By.ID, "tree")
    concepts = driver.find_elements(By.CSS_SELECTOR, "#tree a.node[data-level='concept']")
    nested = driver.find_elements(By.CSS_SELECTOR, "#tree details ul a.node[data-level='fact']")
    wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "on"))

    box = driver.find_element(By.ID, "q")
    box.send_keys("lentil soup on Sunday")
    driver.find_element(By.CSS_SELECTOR, "#search-form button").click()
    first = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#results li a.node")))
    first_text = first.text
    first.click()
    wait.until(ec.presence_of_element_located((By.ID, "node-title")))
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#history tr")))
    seen = {
        "tree_visible": tree.is_displayed(),
        "concepts": len(concepts),
        "facts_under_concepts": len(nested),
        "first_result": first_text,
        "title": driver.find_element(By.ID, "node-title").text,
        "memory": driver.find_element(By.ID, "node-memory").text,
        "history": driver.find_element(By.ID, "history").text,
        "edges": len(driver.find_elements(By.CSS_SELECTOR, "#edges li")),
        "sources": len(driver.find_elements(By.CSS_SELECTOR, "#sources li")),
    }
    # the screenshot shows the tree: a concept of it lies inside the window when it is taken
    concept = driver.find_element(By.CSS_SELECTOR, "#tree a.node[data-level='concept']")
    seen["tree_in_view"] = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return r.top >= 0 && r.bottom <= window.innerHeight && r.width > 0;", concept)
    driver.save_screenshot(str(shot))
    return seen

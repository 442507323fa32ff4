"""Issue 6: the Dagster UI as a person sees it, in headless Chromium.

One webserver serves the shipped code location over the Dagster instance where the session
fixture ``research_graph`` materialised the quick endpoint's research graph. The sample
endpoint's asset graph must render with every stage's node, and a materialised load curve must
show its plot: the metadata table's "[Show Markdown]" opens a dialog with the embedded PNG.
Screenshots and DOM dumps go to the test report folder (see ``ui_support.report_dir``);
``AUTORESEARCH_UPDATE_SCREENSHOTS=1`` also refreshes docs/screenshots/asset_graph.png.
"""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from PIL import Image

from specs.paths import REPO_ROOT
from ui_support import Browser, Webserver, capture_page, report_dir, require_chromium, start_webserver

pytestmark = [pytest.mark.browser, pytest.mark.engine, pytest.mark.timeout(3600)]  # may build research_graph

SAMPLE_ENDPOINT = "support_smollm"
REAL_LOCATION = "dagster_project.definitions"

# The load-curve asset whose plot must render: the real stage, materialised (real sweeps on a
# real vLLM server) by the session fixture ``research_graph`` into the Dagster home the webserver reads.
LOAD_CURVE = dg.AssetKey(["quick", "load_curve"])
PLOT_METADATA_KEY = "load_curve_plot"

GROUP_LOCATION = """
query { assetNodes { assetKey { path } groupName repository { name location { name } } } }
"""
LATEST_METADATA = """
query ($key: AssetKeyInput!) { assetOrError(assetKey: $key) { __typename
  ... on Asset { assetMaterializations(limit: 1) { metadataEntries { label __typename
    ... on MarkdownMetadataEntry { mdStr } } } } } }
"""
IMG_STATE = """(() => {
  const img = [...document.querySelectorAll('img')].find(i => i.src.startsWith('data:image/png'));
  if (!img || !img.complete || img.naturalWidth === 0) return null;
  const box = img.getBoundingClientRect();
  return {src: img.src, alt: img.alt, naturalWidth: img.naturalWidth,
          width: box.width, height: box.height, top: box.top, left: box.left};
})()"""


def graph_node_texts(dom: str) -> set[str]:
    """Texts inside the asset graph's nodes (each node is an SVG <foreignObject>; at any zoom
    level, full or minimal, the node shows its asset name as text)."""
    nodes = re.findall(r"<foreignObject\b.*?</foreignObject>", dom, flags=re.S)
    return {text.strip() for node in nodes for text in re.findall(r">([^<>]+)<", node)}


def assert_real_screenshot(path: Path) -> None:
    """A full-size PNG with real content (not a blank or single-colour page)."""
    with Image.open(path) as image:
        assert image.size == (1600, 1000), image.size
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, f"{path} looks blank ({len(colours)} colours)"


@pytest.fixture(scope="module")
def ui(research_graph) -> Iterator[Webserver]:
    """Webserver on the shipped code location over the instance where the research graph was materialised."""
    require_chromium()  # fail with a clear message before spending time on the server
    server = start_webserver(
        research_graph.dagster_home, ["-m", REAL_LOCATION], report_dir() / "ui_webserver.log", env=research_graph.env
    )
    try:
        yield server
    finally:
        server.stop()


def test_asset_graph_renders(ui: Webserver) -> None:
    nodes = [n for n in ui.graphql(GROUP_LOCATION)["assetNodes"] if n["groupName"] == SAMPLE_ENDPOINT]
    assert nodes, f"no assets in group {SAMPLE_ENDPOINT}"
    repo = nodes[0]["repository"]
    url = f"{ui.url}/locations/{repo['name']}@{repo['location']['name']}/asset-groups/{SAMPLE_ENDPOINT}"
    shot = report_dir() / "asset_graph.png"

    dom = capture_page(url, screenshot=shot)
    (report_dir() / "asset_graph.html").write_text(dom)

    assert SAMPLE_ENDPOINT in dom
    node_texts = graph_node_texts(dom)
    expected = {n["assetKey"]["path"][-1] for n in nodes}
    assert "engine_identity" in expected
    assert expected <= node_texts, f"the graph lacks nodes {sorted(expected - node_texts)}"
    assert_real_screenshot(shot)
    if os.environ.get("AUTORESEARCH_UPDATE_SCREENSHOTS") == "1":
        docs = REPO_ROOT / "docs" / "screenshots"
        docs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, docs / "asset_graph.png")


def test_load_curve_plot_renders(ui: Webserver) -> None:
    data = ui.graphql(LATEST_METADATA, {"key": {"path": LOAD_CURVE.path}})["assetOrError"]
    entries = {e["label"]: e for e in data["assetMaterializations"][0]["metadataEntries"]}
    markdown = entries[PLOT_METADATA_KEY]["mdStr"]
    embedded = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", markdown)
    assert embedded, f"{PLOT_METADATA_KEY} holds no embedded PNG"

    with Browser() as browser:
        browser.goto(f"{ui.url}/assets/{'/'.join(LOAD_CURVE.path)}")
        browser.wait_for(
            f"document.body.innerText.includes({PLOT_METADATA_KEY!r})", what=f"the metadata row {PLOT_METADATA_KEY}"
        )
        assert browser.evaluate(IMG_STATE) is None  # the plot sits behind the dialog until clicked
        browser.click_text("[Show Markdown]", row=PLOT_METADATA_KEY)
        img = browser.wait_stable(IMG_STATE, what="the load-curve <img>")
        shot = browser.screenshot(report_dir() / "load_curve_plot.png")
        (report_dir() / "load_curve_plot.html").write_text(browser.dom())

    assert img["src"] == f"data:image/png;base64,{embedded.group(1)}"  # the asset's own plot
    assert img["naturalWidth"] > 100 and img["width"] > 100 and img["height"] > 100
    assert img["top"] >= 0 and img["left"] >= 0, img  # wholly inside the 1600x1000 viewport
    assert img["top"] + img["height"] <= 1000 and img["left"] + img["width"] <= 1600, img
    source = Image.open(io.BytesIO(base64.b64decode(embedded.group(1)))).convert("RGB")
    with Image.open(shot) as image:
        # The pixels where the browser drew the <img> are the plot's own pixels.
        box = (
            round(img["left"]),
            round(img["top"]),
            round(img["left"] + img["width"]),
            round(img["top"] + img["height"]),
        )
        drawn = np.asarray(image.convert("RGB").crop(box), float)
    expected = np.asarray(source.resize((box[2] - box[0], box[3] - box[1])), float)
    difference = np.abs(drawn - expected).mean()
    white = np.abs(255.0 - expected).mean()  # how far the plot is from an empty white box
    assert difference < 0.25 * white, (
        f"the screenshot does not show the plot: mean abs diff {difference:.2f} vs {white:.2f} for a blank box"
    )

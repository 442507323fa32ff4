"""Screenshots of the real Dagster UI after a real campaign, for docs/screenshots/.

    DAGSTER_HOME=... AUTORESEARCH_HOME=... .venv/bin/python benchmarks/ui_screenshots.py support_smollm

Starts the webserver over the instance the campaign recorded into (the code location is the
shipped one), then Chromium captures: the endpoint's asset group with its materialised assets,
the runs list, the confirmed baseline's verdicts table and the review report's markdown (its
"[Show Markdown]" dialog). Files go to docs/screenshots/ (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from ui_support import Browser, start_webserver  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("endpoint")
    ap.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    args = ap.parse_args()
    out = Path(args.out)
    home = Path(os.environ["DAGSTER_HOME"])
    server = start_webserver(home, ["-m", "dagster_project.definitions"], out / ".webserver.log")
    try:
        nodes = server.graphql(
            "query { assetNodes { assetKey { path } groupName repository { name location { name } } } }"
        )["assetNodes"]
        repo = next(n["repository"] for n in nodes if n["groupName"] == args.endpoint)
        group = f"{server.url}/locations/{repo['name']}@{repo['location']['name']}/asset-groups/{args.endpoint}"
        with Browser() as browser:
            # the group's 19 assets at a size where each node's materialisation status is legible
            browser.send(
                "Emulation.setDeviceMetricsOverride", width=2400, height=1350, deviceScaleFactor=1, mobile=False
            )
            browser.goto(group)
            browser.wait_stable("document.querySelectorAll('foreignObject').length", what="the asset graph")
            browser.wait_for("document.body.innerText.includes('Materialized')", what="materialised assets")
            browser.screenshot(out / "asset_graph.png")
            browser.send(
                "Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1, mobile=False
            )
            browser.goto(f"{server.url}/runs")
            browser.wait_for("document.body.innerText.includes('campaign_job')", what="the campaign's run")
            browser.screenshot(out / "runs.png")
            browser.goto(f"{server.url}/assets/{args.endpoint}/confirmed_baseline")
            # Dagster renders table metadata inline (a "Show schema" link beside it): wait for the verdicts
            # table's own header, then bring it into view
            browser.wait_for(
                "[...document.querySelectorAll('table thead')].some(h => h.innerText.includes('effect_low'))",
                what="the verdicts table",
            )
            browser.evaluate(
                "[...document.querySelectorAll('table thead')].find(h => h.innerText.includes('effect_low'))"
                ".closest('table').scrollIntoView({block: 'center'})"
            )
            browser.screenshot(out / "verdicts_table.png")
            browser.goto(f"{server.url}/assets/{args.endpoint}/review_report")
            browser.wait_for("document.body.innerText.includes('report')", what="the review report")
            browser.click_text("[Show Markdown]", row="report")
            browser.wait_for("document.body.innerText.includes('Effect')", what="the review's markdown")
            browser.screenshot(out / "review_report.png")
    finally:
        server.stop()
    print("wrote", ", ".join(sorted(p.name for p in out.glob("*.png"))))


if __name__ == "__main__":
    main()

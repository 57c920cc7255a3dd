"""The report's HTML page in a real headless Chromium (Debian's chromium; CI installs it): every
drawing rendered, nothing fetched, and the first screen at 1280 px."""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import patience
from report_runs import Collector, three_seeds

from compare import report


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)


def _browse(page_dir: Path, page: str, work: Path,
            window: str = "1280,800") -> tuple[str, list[str]]:
    """The DOM of page_dir/page after headless Chromium rendered it, and every URL that the
    page itself requested (the browser's net log, initiator = the page's origin).

    The page is served on the loopback interface so that its requests carry an origin; the
    browser's own background traffic (component updates, time sync) has none and is ignored.
    """
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(page_dir))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    net_log = work / "netlog.json"
    try:
        dom = subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={work / 'profile'}", f"--log-net-log={net_log}",
             f"--window-size={window}", "--hide-scrollbars",
             "--virtual-time-budget=3000", "--dump-dom", f"{origin}/{page}"],
            capture_output=True, text=True, timeout=patience(120), check=True).stdout
    finally:
        server.shutdown()
        server.server_close()
    log = json.loads(net_log.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    requested = [e["params"]["url"] for e in log["events"] if e["type"] == start_job
                 and e.get("params", {}).get("initiator") == origin]
    return dom, [u for u in requested if u != f"{origin}/favicon.ico"]  # favicon: the browser's


@pytest.mark.skipif(_chromium() is None, reason="no headless chromium installed "
                    "(apt-get install chromium) to render report.html")
def test_report_html_in_a_headless_browser_shows_every_plot_and_fetches_nothing(tmp_path):
    three_seeds(tmp_path / "cmp")
    report.rebuild(tmp_path / "cmp", [tmp_path / "cmp"])
    dom, requested = _browse(tmp_path / "cmp", "report.html", tmp_path)
    collector = Collector()
    collector.feed(dom)
    # each drawing rendered: the headline's accuracy against training time, the learning
    # curves, the step-time spread and the phase split (compare.report.plots)
    assert collector.tags.count("svg") == 4
    assert collector.external == []
    for table in ("figures-0", "runs-0", "parity-0", "fairness-0", "environment-0"):
        assert f'id="{table}"' in dom
    assert "PyTorch trained 1.37x faster" in dom and "training loss per step" in dom
    assert requested == []  # nothing fetched: not the network, not even a file beside it
    # The check itself sees a page that does fetch (an image off the network).
    (tmp_path / "cmp" / "fetching.html").write_text(
        '<html><body><img src="https://example.invalid/plot.png"></body></html>')
    _, requested = _browse(tmp_path / "cmp", "fetching.html", tmp_path)
    assert requested == ["https://example.invalid/plot.png"]


# Measures the laid-out page in the browser (a copy of the report with this at its end): the
# page's width, what sticks out past the window other than inside a scrolling table box,
# and where the headline figure ends, written onto <body> for --dump-dom to show.
LAYOUT_PROBE = """<script>
addEventListener("load", function () {
  var wide = [];
  document.querySelectorAll("body *").forEach(function (e) {
    if (!e.closest(".scroll") && e.getBoundingClientRect().right > innerWidth + 0.5)
      wide.push(e.tagName + (e.id ? "#" + e.id : ""));
  });
  var figure = document.querySelector("#figures-section-0 .figure");
  document.body.setAttribute("data-page-width", document.documentElement.scrollWidth);
  document.body.setAttribute("data-too-wide", wide.slice(0, 5).join(" ") || "none");
  document.body.setAttribute("data-figure-bottom",
                             figure ? Math.ceil(figure.getBoundingClientRect().bottom) : -1);
});
</script>"""


@pytest.mark.skipif(_chromium() is None, reason="no headless chromium installed "
                    "(apt-get install chromium) to render report.html")
def test_report_answers_on_the_first_screen_at_1280_px_without_scrolling_sideways(tmp_path):
    """At 1280x800 the page is no wider than the window (wide tables scroll inside their own
    box) and the verdict, the headline table and the headline figure end on the first
    screen."""
    three_seeds(tmp_path / "cmp")
    report.rebuild(tmp_path / "cmp", [tmp_path / "cmp"])
    page = (tmp_path / "cmp" / "report.html").read_text()
    (tmp_path / "cmp" / "probe.html").write_text(page.replace("</body>", LAYOUT_PROBE + "</body>"))
    dom, _ = _browse(tmp_path / "cmp", "probe.html", tmp_path, window="1280,800")
    found = dict(re.findall(r'data-(page-width|too-wide|figure-bottom)="([^"]*)"', dom))
    assert int(found["page-width"]) <= 1280, found
    assert found["too-wide"] == "none", found
    assert 0 < int(found["figure-bottom"]) <= 800, found

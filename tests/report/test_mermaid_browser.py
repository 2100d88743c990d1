"""The step summary's charts: every ```mermaid block renders with Mermaid itself (the npm
package the test command installs into .venv/mermaid) in headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import REPO, gatekeeper
from tests.report.runs import HOSTILE, failing_run

MERMAID_JS = REPO / ".venv" / "mermaid" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"

RENDER_JS = """async (blocks) => {
  mermaid.initialize({startOnLoad: false, securityLevel: 'strict'});
  const out = [];
  for (let i = 0; i < blocks.length; i++) {
    try {
      await mermaid.parse(blocks[i]);
      const {svg} = await mermaid.render('chart' + i, blocks[i]);
      const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
      const lines = doc.querySelectorAll('[class*=line-plot] path').length;
      out.push({ok: true, lines});
    } catch (e) { out.push({ok: false, error: String(e)}); }
  }
  return out;
}"""


def test_step_summary_charts_render_with_mermaid(chromium, tmp_path: Path):
    assert MERMAID_JS.exists(), "run `bash scripts/bootstrap.sh --test` (installs mermaid)"
    run, policy = failing_run(tmp_path)
    summary = tmp_path / "summary.md"
    proc = gatekeeper("check", str(run), "-p", str(policy), "-q",
                      env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1, proc.stderr
    text = summary.read_text()
    assert len(text.encode()) < 1024 * 1024
    blocks = re.findall(r"```mermaid\n(.*?)\n```", text, re.S)
    assert len(blocks) == 6  # one per failing or erroring rule
    assert text.index("| rule |") < text.index("```mermaid")  # under the table
    # the hostile name is inert: literal only inside code spans, entities elsewhere
    prose = re.sub(r"(`+).*?\1", "", re.sub(r"```mermaid.*?```", "", text, flags=re.S))
    assert "<img" not in prose and "<script" not in prose
    assert HOSTILE in text
    page = chromium.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_content("<!DOCTYPE html><html><body></body></html>")
    page.add_script_tag(path=str(MERMAID_JS))
    results = page.evaluate(RENDER_JS, blocks)
    page.close()
    assert all(r["ok"] for r in results), results
    # the series and its bound (a spike's median and threshold); `finite` has no bound
    titles = [re.search(r'title "(\S+)', b).group(1) for b in blocks]
    lines = {t: r["lines"] for t, r in zip(titles, results, strict=True)}
    assert lines.pop("demo/grad-finite") == 1 and lines.pop("demo/loss-spike") == 3
    assert all(n == 2 for n in lines.values()), lines
    assert errors == []

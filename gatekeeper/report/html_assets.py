"""The inline stylesheet and the filter script of the HTML report (no files, no CDN), and
the Content-Security-Policy that lets only that script run."""

from __future__ import annotations

import base64
import hashlib

CSS = """
:root{--fail:#c62828;--error:#8e24aa;--warn:#ef8f00;--pass:#2e7d32;--skip:#78909c;
--pending:#0277bd;--ink:#1d232a;--mute:#5f6b76;--line:#d8dee4;--bg:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--ink);background:var(--bg)}
header{padding:16px 24px;background:#fff;border-bottom:1px solid var(--line)}
h1{margin:0 0 4px;font-size:20px}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:600}
.v-pass{background:var(--pass)}.v-fail{background:var(--fail)}.v-error{background:var(--error)}
.v-pending{background:var(--pending)}.v-nothing_judged{background:var(--warn)}
.meta{color:var(--mute)}.meta a{color:inherit}
.counts span{margin-right:12px}
.filters{padding:10px 24px;display:flex;gap:14px;flex-wrap:wrap;align-items:center;
background:#fff;border-bottom:1px solid var(--line);position:sticky;top:0;z-index:1}
.filters label{white-space:nowrap}
main{padding:16px 24px;max-width:1100px}
.rule{background:#fff;border:1px solid var(--line);border-left:5px solid var(--skip);
border-radius:4px;margin:0 0 14px;padding:10px 14px}
.rule.s-fail{border-left-color:var(--fail)}.rule.s-error{border-left-color:var(--error)}
.rule.s-warn{border-left-color:var(--warn)}.rule.s-pass{border-left-color:var(--pass)}
.rule.s-pending{border-left-color:var(--pending)}
.rule h2{font-size:15px;margin:0 0 4px;word-break:break-all}
.badge{display:inline-block;min-width:52px;text-align:center;padding:0 6px;border-radius:3px;
color:#fff;font-size:12px;font-weight:600;margin-right:8px;vertical-align:1px}
.b-fail{background:var(--fail)}.b-error{background:var(--error)}.b-warn{background:var(--warn)}
.b-pass{background:var(--pass)}.b-skip{background:var(--skip)}.b-pending{background:var(--pending)}
.b-nothing_judged{background:var(--warn)}
.msg{margin:2px 0 6px;word-break:break-word}
dl{display:grid;grid-template-columns:max-content 1fr;gap:0 12px;margin:0 0 6px;
color:var(--mute);font-size:13px}
dd{margin:0;word-break:break-word}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
.override{background:#fff8e1;border:1px solid #ffe082;padding:2px 6px;border-radius:3px}
.chart{display:block;height:220px;overflow:visible}
.chart .frame{fill:none;stroke:var(--line)}
.chart .grid{stroke:#eef1f4}
.chart .tick,.chart .axis{font-size:10px;fill:var(--mute)}
.chart .series{fill:none;stroke:#1565c0;stroke-width:1.2;vector-effect:non-scaling-stroke}
.chart .band{fill:#2e7d32;fill-opacity:.09}
.chart .span{fill:#1565c0;fill-opacity:.06}
.chart .bound{fill:none;stroke:var(--fail);stroke-width:1;stroke-dasharray:5 3;
vector-effect:non-scaling-stroke}
.chart .median{fill:none;stroke:#6d4c41;stroke-width:1;vector-effect:non-scaling-stroke}
.chart .deadline{stroke:var(--warn);stroke-width:1.5;stroke-dasharray:3 3}
.chart .focus{stroke:var(--fail);stroke-width:1;stroke-opacity:.5}
.chart .mark{fill:var(--fail);stroke:#fff;stroke-width:1}
.chart .nonfinite{fill:var(--error)}
.legend{font-size:12px;color:var(--mute);margin-top:2px}
.nochart{color:var(--mute);font-style:italic}
.spark{display:inline-block;width:160px;height:32px;vertical-align:middle}
table.runs{border-collapse:collapse;background:#fff;width:100%}
table.runs td,table.runs th{border-bottom:1px solid var(--line);padding:6px 8px;text-align:left;
vertical-align:middle}
.hidden{display:none}
"""

# Filters act on data-* attributes the page wrote (escaped); the script never builds
# markup from them, so there is nothing to inject into.
JS = """
(function(){
  var rules = Array.prototype.slice.call(document.querySelectorAll('.rule'));
  var boxes = Array.prototype.slice.call(document.querySelectorAll('input[name=status]'));
  var policy = document.getElementById('f-policy');
  var metric = document.getElementById('f-metric');
  var shown = document.getElementById('f-shown');
  function apply(){
    var want = {}; boxes.forEach(function(b){ want[b.value] = b.checked; });
    var p = policy.value, m = metric.value.toLowerCase(), n = 0;
    rules.forEach(function(r){
      // an overridden rule stays in view whatever its status (a switched-off rule is a skip)
      var ok = (want[r.dataset.status] || r.dataset.overridden) && (!p || r.dataset.policy === p) &&
        (!m || r.dataset.metric.toLowerCase().indexOf(m) >= 0);
      r.classList.toggle('hidden', !ok); if (ok) n++;
    });
    shown.textContent = n + ' of ' + rules.length + ' rules shown';
  }
  boxes.forEach(function(b){ b.addEventListener('change', apply); });
  policy.addEventListener('change', apply);
  metric.addEventListener('input', apply);
  apply();
})();
"""


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


# The page may load nothing: a CI artifact or a file:// URL opens offline, and a metric
# name that smuggled markup past escaping still could not fetch anything. Only the filter
# script above may run (by its hash), so an injected inline script would not either.
CSP = (
    f"default-src 'none'; style-src 'unsafe-inline'; script-src '{_sha256(JS)}'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

"""The run report: one self-contained HTML page in the run directory (`report.html`), the
dashboard's curves as inline SVG and the sample games replayed move by move.

Self-contained means no request leaves the page: no scripts, fonts or styles from elsewhere,
so it opens as a file or through `arl view` (a server on 127.0.0.1) on a machine without
network. The driver rewrites it as the run goes; while the run is live the page reloads
itself every `REFRESH_S` seconds. Model output is data: every text reaches the page as JSON
inside a script element of type application/json (every <, > and & escaped, so no text
can end the element) and is shown with `textContent`, never parsed as HTML. The page's
Content-Security-Policy lets only its own style and script run, named by their sha256.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os

from arl.app.jsonl import json_rows
from arl.app.plot import PANELS, SMOOTH_STEPS, metrics_file, read_metrics, series, trailing_mean

REPORT_FILE = "report.html"
REFRESH_S = 30
GAMES_SHOWN = 8  # the newest sample conversations
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f")
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 460, 240, 52, 34, 26, 12


def write_report(run_dir: str, live: bool = False) -> str:
    """Write RUN_DIR/report.html from metrics.jsonl and samples.jsonl; return its path."""
    rows = read_metrics(metrics_file(run_dir))
    games = _games(os.path.join(run_dir, "samples.jsonl"))
    charts = []
    for p in PANELS:  # a second axis becomes a chart of its own
        charts.append(svg_chart(p.title, p.ylabel, _panel_series(rows, p.keys), p.smooth))
        if p.right:
            charts.append(svg_chart(p.right_label, p.right_label,
                                    _panel_series(rows, p.right), p.smooth))
    name = os.path.basename(os.path.normpath(run_dir))
    page = PAGE.format(
        title=html.escape(name),
        refresh=f'<meta http-equiv="refresh" content="{REFRESH_S}">' if live else "",
        status=html.escape(_status(rows, live)),
        charts="\n".join(c for c in charts if c),
        games=embedded_json(games),
        csp=CSP,
        style=STYLE,
        script=SCRIPT,
    )
    path = os.path.join(run_dir, REPORT_FILE)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, path)  # a reader never sees half a page
    return path


def embedded_json(value: object) -> str:
    """`value` as JSON that can sit inside a <script> element whatever its strings hold:
    every <, > and & is written as a \\u escape, so no `</script`, `<!--` or `<script`
    can end or change the element (JSON.parse reads the escapes back as the characters)."""
    text = json.dumps(value, allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _status(rows: list[dict], live: bool) -> str:
    if not rows:
        return "no steps yet"
    last = rows[-1]
    reward = [r["rollout/reward_mean"] for r in rows if r.get("rollout/reward_mean") is not None]
    tail = sum(reward[-SMOOTH_STEPS:]) / max(1, len(reward[-SMOOTH_STEPS:]))
    state = "running" if live else "finished"
    return (f"{state}: {len(rows)} steps logged (last step {last['step']}); reward over the "
            f"last {min(SMOOTH_STEPS, len(reward))} steps {tail:+.3f}")


def _panel_series(rows: list[dict], keys: tuple[str, ...]):
    return [s for key in keys for s in series(rows, key)]


def _games(path: str) -> list[dict]:
    """The newest sample conversations of samples.jsonl, as {step, reward, outcome,
    messages: [{role, content}]} (rows from before messages were recorded keep their text)."""
    rows = [row for _, row in json_rows(path)]
    games = []
    for row in rows[-GAMES_SHOWN:][::-1]:
        messages = row.get("messages")
        if not (isinstance(messages, list) and messages and all(
                isinstance(m, dict) and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str) for m in messages)):
            messages = [{"role": "transcript", "content": str(row.get("conversation") or "")}]
        reward = row.get("reward")
        reward = reward if isinstance(reward, int | float) and math.isfinite(reward) else None
        games.append({"step": row.get("step"), "reward": reward,
                      "outcome": row.get("outcome", ""), "messages": messages})
    return games


def svg_chart(title: str, ylabel: str, lines, smooth: bool) -> str:
    """An inline SVG line chart of `lines` [(name, xs, ys)]: raw series faint and, with
    `smooth`, their trailing means bold. "" when there is nothing to draw."""
    lines = [(n, xs, ys) for n, xs, ys in lines if xs]
    if not lines:
        return ""
    x0, x1 = min(min(xs) for _, xs, _ in lines), max(max(xs) for _, xs, _ in lines)
    y0, y1 = min(min(ys) for *_, ys in lines), max(max(ys) for *_, ys in lines)
    if y0 == y1:
        y0, y1 = y0 - 0.5, y1 + 0.5
    x1 = x1 if x1 > x0 else x0 + 1

    def px(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def py(y: float) -> float:
        return H - PAD_B - (y - y0) / (y1 - y0) * (H - PAD_B - PAD_T)

    parts = [f'<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{W / 2}" y="16" text-anchor="middle" class="t">{html.escape(title)}</text>']
    for i in range(5):  # y ticks and grid
        y = y0 + (y1 - y0) * i / 4
        parts.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
                     'class="g"/>')
        parts.append(f'<text x="{PAD_L - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.3g}</text>')
    for x in sorted({round(x0 + (x1 - x0) * i / 4) for i in range(5)}):  # x ticks
        parts.append(f'<text x="{px(x):.1f}" y="{H - PAD_B + 14}" text-anchor="middle">'
                     f'{x}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 4}" text-anchor="middle">step</text>')
    parts.append(f'<text transform="translate(12 {H / 2}) rotate(-90)" text-anchor="middle">'
                 f'{html.escape(ylabel)}</text>')
    for k, (name, xs, ys) in enumerate(lines):
        color = COLORS[k % len(COLORS)]
        shown = [(xs, ys, 0.35 if smooth else 1.0)]
        if smooth:
            shown.append((xs, trailing_mean(ys, SMOOTH_STEPS), 1.0))
        for sx, sy, opacity in shown:
            points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy, strict=True))
            width = 1.6 if opacity == 1 else 1
            parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" '
                         f'stroke-opacity="{opacity}" stroke-width="{width}"/>')
        parts.append(f'<text x="{PAD_L + 6}" y="{PAD_T + 12 + 12 * k}" fill="{color}" '
                     f'class="l">{html.escape(name.split("/", 1)[-1])}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } .status { color: #555; margin-bottom: 1em; }
.charts { display: flex; flex-wrap: wrap; gap: 8px; }
svg.chart { border: 1px solid #ddd; background: #fcfcfc; font-size: 10px; }
svg .t { font-size: 13px; font-weight: 600; } svg .g { stroke: #e5e5e5; }
svg .l { font-size: 10px; }
.game { border: 1px solid #ccc; border-radius: 6px; padding: .6em; margin: .6em 0;
  max-width: 60em; }
.msg { white-space: pre-wrap; font-family: ui-monospace, monospace; padding: .4em;
  border-radius: 4px; margin: .3em 0; }
.role-user, .role-tool { background: #eef4ff; } .role-assistant { background: #effbef; }
.role-system, .role-transcript { background: #f4f4f4; color: #555; }
.who { font-weight: 600; font-family: system-ui, sans-serif; }
button { margin-right: .4em; }
"""

SCRIPT = """
const games = JSON.parse(document.getElementById("game-data").textContent);
const root = document.getElementById("games");
if (!games.length) root.textContent = "no sample conversations yet";
games.forEach((game, g) => {
  const box = document.createElement("div"); box.className = "game"; box.id = "game-" + g;
  const head = document.createElement("div");
  head.textContent = `step ${game.step}: reward ${game.reward}, outcome ${game.outcome}`;
  const counter = document.createElement("span");
  const view = document.createElement("div");
  const buttons = document.createElement("div");
  let shown = Math.min(2, game.messages.length);
  function draw() {
    view.replaceChildren();
    game.messages.slice(0, shown).forEach(m => {
      const d = document.createElement("div"); d.className = "msg role-" + m.role;
      const who = document.createElement("div"); who.className = "who"; who.textContent = m.role;
      const body = document.createElement("div"); body.textContent = m.content;
      d.append(who, body); view.append(d);
    });
    counter.textContent = ` move ${shown} of ${game.messages.length} `;
  }
  [["first", () => shown = Math.min(2, game.messages.length)],
   ["back", () => shown = Math.max(1, shown - 1)],
   ["next", () => shown = Math.min(game.messages.length, shown + 1)],
   ["all", () => shown = game.messages.length]].forEach(([label, act]) => {
    const b = document.createElement("button"); b.textContent = label;
    b.onclick = () => { act(); draw(); }; buttons.append(b);
  });
  buttons.append(counter);
  box.append(head, buttons, view); root.append(box); draw();
});
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# No inline script or style runs but these two, by their hashes: whatever a sample holds,
# the page runs no other code.
CSP = (f"default-src 'none'; style-src {_csp_hash(STYLE)}; script-src {_csp_hash(SCRIPT)}; "
       "img-src 'none'; base-uri 'none'; form-action 'none'")

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">{refresh}
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>arl run {title}</title>
<style>{style}</style></head>
<body>
<h1>arl run {title}</h1>
<div class="status">{status}</div>
<div class="charts">
{charts}
</div>
<h2>Sample games</h2>
<div id="games"></div>
<script type="application/json" id="game-data">{games}</script>
<script>{script}</script>
</body></html>
"""

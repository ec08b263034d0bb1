"""The dashboard's HTML: the login form and the overview page, rendered on the server.

Plain strings, no template engine and no script: every value that comes from the ledger or a
request (names, datasets, query text, fingerprints, details) is escaped with :func:`esc` where
it is inserted, and the page's Content-Security-Policy forbids scripts anyway. Charts are inline
SVG; the colours are the Okabe–Ito palette (distinguishable with every common colour-vision
deficiency), and each colour also has a pattern or a word beside it.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

from veil.accounting.budget import Budget, show
from veil.accounting.pages import COUNT_CAP
from veil.service.dashboard_data import (
    AUDIT_ROWS,
    AlertLine,
    BudgetView,
    Charge,
    Overview,
    primary,
)

__all__ = ["Paths", "dashboard_page", "esc", "login_page", "message_page", "num"]

QUERY_CHARS = 90  # query text shown in the audit table (all of it, up to TITLE_CHARS, on hover)
TITLE_CHARS = 2000
ALERT_LINES = 50
CHART_W, CHART_H = 400, 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 44, 12, 12, 26


@dataclass(frozen=True)
class Paths:
    """The dashboard's URLs, under the application's root path."""

    root: str = ""

    @property
    def home(self) -> str:
        return f"{self.root}/dashboard"

    @property
    def login(self) -> str:
        return f"{self.root}/dashboard/login"

    @property
    def logout(self) -> str:
        return f"{self.root}/dashboard/logout"

    @property
    def csv(self) -> str:
        return f"{self.root}/dashboard/audit.csv"


def esc(value: object) -> str:
    """``value`` as text safe in HTML content and in a quoted attribute."""
    return html.escape(str(value), quote=True)


def num(x: Fraction) -> str:
    """``x`` to 3 significant digits for reading: ``0.3``, ``4.67``, ``12,300``, ``1e-6``."""
    if x == 0:
        return "0"
    f = float(x)
    if not math.isfinite(f):
        return "∞" if f > 0 else "−∞"
    magnitude = math.floor(math.log10(abs(f)))
    if magnitude < -3:
        mantissa, _, exponent = f"{f:.2e}".partition("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    digits = 2 - magnitude  # decimals that keep 3 significant digits (negative: round left)
    text = f"{f:.{digits}f}" if digits > 0 else f"{round(f, digits):,.0f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _exact(x: Fraction) -> str:
    return f"exactly {show(x)}"


def _amount(x: Fraction, css: str = "n") -> str:
    return f'<span class="{css}" title="{esc(_exact(x))}">{esc(num(x))}</span>'


def _loss(loss: Budget | None) -> str:
    """A charge's loss: ``ε 0.1``, ``ε 0.1 δ 1e-6`` or ``ρ 0.005``, exact on hover."""
    if loss is None:
        return "—"
    if loss.kind == "zcdp":
        rho = loss.rho or Fraction(0)
        return f'<span title="{esc("ρ " + _exact(rho))}">ρ {esc(num(rho))}</span>'
    eps = loss.epsilon or Fraction(0)
    exact = f"ε {_exact(eps)}"
    text = f"ε {num(eps)}"
    if loss.delta:
        exact += f", δ {_exact(loss.delta)}"
        text += f" δ {num(loss.delta)}"
    return f'<span title="{esc(exact)}">{esc(text)}</span>'


def _when(at: datetime) -> str:
    return f'<time datetime="{esc(at.isoformat())}">{esc(at.strftime("%Y-%m-%d %H:%M:%S"))}</time>'


def count(n: int, capped: bool = False) -> str:
    """A count of events, as the ledger counts them (up to ``COUNT_CAP``: then "10,000+")."""
    if n > COUNT_CAP:
        return f"{COUNT_CAP:,}+"
    return f"{n:,}" + ("+" if capped else "")


def _percent(share: Fraction) -> str:
    if share == 0:
        return "0 %"
    if share < Fraction(1, 100):
        return "<1 %"
    whole = math.floor(share * 100) if share < 1 else round(share * 100)
    return f"{whole} %"


def _width(part: Fraction, whole: Fraction) -> str:
    if whole <= 0:
        return "0"
    return f"{max(0.0, min(100.0, float(part / whole * 100))):.3f}".rstrip("0").rstrip(".")


# ------------------------------------------------------------------------------ the shell

_CSS = """
:root{--ink:#1d2733;--muted:#5b6876;--line:#d8dee6;--bg:#f3f5f8;--card:#fff;
--spent:#0072B2;--reserved:#E69F00;--left:#e4eaf1;--alert:#D55E00;--ok:#009E73;
font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:var(--ink);background:var(--bg);line-height:1.45}
*{box-sizing:border-box}
body{margin:0}
a{color:var(--spent)}
.top{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center;justify-content:space-between;
padding:.75rem clamp(1rem,3vw,2rem);background:#14212f;color:#fff}
.brand{display:flex;align-items:center;gap:.6rem;font-weight:650;font-size:1.15rem}
.brand small{font-weight:400;color:#b9c6d3;font-size:.9rem}
.who{display:flex;align-items:center;gap:.6rem;flex-wrap:wrap;font-size:.92rem}
.role{border:1px solid #6f8398;border-radius:999px;padding:0 .5rem;font-size:.78rem;color:#d6e0ea}
button,.button{font:inherit;border:1px solid var(--spent);background:var(--spent);color:#fff;
border-radius:6px;padding:.45rem .9rem;cursor:pointer;text-decoration:none}
.top button{background:transparent;border-color:#6f8398;padding:.25rem .7rem;color:#fff}
main{max-width:1280px;margin:0 auto;padding:1.25rem clamp(.75rem,3vw,2rem) 2rem}
h2{font-size:1.1rem;margin:1.75rem 0 .6rem}
h2 .count{color:var(--muted);font-weight:400}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:.75rem}
.tile{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:.7rem .9rem}
.tile b{display:block;font-size:1.6rem;font-variant-numeric:tabular-nums;line-height:1.2}
.tile span{color:var(--muted);font-size:.85rem}
.tile.warn b{color:var(--alert)}
.legend{display:flex;flex-wrap:wrap;gap:.4rem 1.1rem;color:var(--muted);font-size:.85rem;
margin:.2rem 0 .8rem}
.sw{display:inline-block;width:.85rem;height:.85rem;border-radius:2px;vertical-align:-.1rem;
margin-right:.3rem}
.sw.spent,.bar .spent{background:var(--spent)}
.sw.reserved,.bar .reserved{background:repeating-linear-gradient(135deg,var(--reserved) 0 3px,
#f6d38a 3px 6px)}
.sw.left,.bar{background:var(--left)}
.sw.limit{height:0;border-top:2px dashed var(--alert);border-radius:0}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(340px,100%),1fr));gap:1rem}
.budget{background:var(--card);border:1px solid var(--line);border-radius:10px;
padding:.85rem 1rem 1rem;min-width:0}
.budget.hot{border-color:var(--alert);box-shadow:inset 4px 0 0 var(--alert)}
.budget header{display:flex;justify-content:space-between;align-items:baseline;gap:.5rem}
.budget h3{margin:0;font-size:1rem;overflow-wrap:anywhere}
.budget h3 .sep{color:var(--muted);font-weight:400;margin:0 .25rem}
.pct{font-variant-numeric:tabular-nums;font-weight:650;white-space:nowrap}
.hot .pct{color:var(--alert)}
.bar{display:flex;height:14px;border-radius:7px;overflow:hidden;margin:.55rem 0 .45rem;
border:1px solid #cfd8e2}
.bar span{display:block;height:100%}
.nums{margin:.1rem 0;font-size:.9rem;font-variant-numeric:tabular-nums}
.nums .unit{font-weight:650}
.nums .n{font-weight:650}
.nums .k{color:var(--muted)}
.meta{color:var(--muted);font-size:.82rem;margin:.35rem 0 0}
.chart{display:block;width:100%;height:auto;margin-top:.5rem}
.chart text{font-size:11px;fill:var(--muted);font-family:inherit}
.chart .axis{stroke:#9aa7b4;stroke-width:1}
.chart .gridline{stroke:#e7ecf1;stroke-width:1}
.chart .limit{stroke:var(--alert);stroke-width:1.5;stroke-dasharray:5 4}
.chart .area{fill:#56B4E9;fill-opacity:.22}
.chart .line{fill:none;stroke:var(--spent);stroke-width:2;stroke-linejoin:round}
.chart .dot{fill:var(--spent)}
.empty{color:var(--muted);background:var(--card);border:1px dashed var(--line);border-radius:10px;
padding:1rem}
.alerts{list-style:none;margin:0;padding:0;background:var(--card);border:1px solid var(--line);
border-radius:10px}
.alerts li{padding:.5rem .9rem;border-top:1px solid var(--line);display:flex;flex-wrap:wrap;
gap:.2rem .8rem}
.alerts li:first-child{border-top:0}
.alerts .mark{color:var(--alert);font-weight:700}
.alerts time{color:var(--muted);font-variant-numeric:tabular-nums}
.note{color:var(--muted);font-size:.88rem;margin:.2rem 0 .6rem}
.scroll{overflow-x:auto;background:var(--card);border:1px solid var(--line);border-radius:10px}
table{border-collapse:collapse;width:100%;font-size:.86rem}
th,td{text-align:left;padding:.42rem .7rem;border-bottom:1px solid #edf0f4;vertical-align:top}
th{position:sticky;top:0;background:#f8fafc;font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td time,td.cost{white-space:nowrap;font-variant-numeric:tabular-nums}
td code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.8rem;
overflow-wrap:anywhere}
td.fp code{color:var(--muted);white-space:nowrap;overflow-wrap:normal}
tbody tr:hover{background:#f6f9fc}
.status{display:inline-block;border-radius:999px;padding:0 .5rem;font-size:.78rem;
border:1px solid;white-space:nowrap}
.status.committed{color:#005a8c;border-color:#8fbfdc;background:#eef6fb}
.status.reserved{color:#8a5a00;border-color:#eccb85;background:#fdf5e4}
.status.refunded{color:#5b6876;border-color:#cfd6de;background:#f4f6f8}
footer{color:var(--muted);font-size:.8rem;text-align:center;padding:0 1rem 2rem}
.login{max-width:440px;margin:9vh auto;background:var(--card);border:1px solid var(--line);
border-radius:14px;padding:1.6rem 1.6rem 1.3rem;box-shadow:0 10px 30px rgba(20,33,47,.08)}
.login h1{font-size:1.35rem;margin:.2rem 0 .3rem}
.login p{color:var(--muted);margin:.3rem 0 1rem;font-size:.92rem}
.login label{display:block;font-weight:600;margin-bottom:.3rem}
.login input{width:100%;font:inherit;padding:.55rem .7rem;border:1px solid #b8c3cf;
border-radius:6px;margin-bottom:.9rem;font-family:ui-monospace,Menlo,Consolas,monospace}
.login input:focus{outline:2px solid var(--spent);outline-offset:1px}
.login button{width:100%;padding:.6rem}
.message{border-radius:8px;padding:.6rem .8rem;margin:0 0 1rem;font-size:.92rem;
border:1px solid}
.message.error{border-color:var(--alert);background:#fdf1ea;color:#8f3b00}
.message.info{border-color:#8fbfdc;background:#eef6fb;color:#005a8c}
.login .fine{font-size:.8rem;margin-top:1rem}
@media (max-width:640px){.tile b{font-size:1.3rem}h2{margin-top:1.3rem}
.audit thead{display:none}
.audit tr{display:block;padding:.55rem .75rem;border-bottom:1px solid var(--line)}
.audit td{display:flex;gap:.6rem;border:0;padding:.1rem 0;text-align:left}
.audit td::before{content:attr(data-label);flex:0 0 5.8rem;color:var(--muted);font-size:.78rem;
padding-top:.1rem}
.audit td.num{text-align:left}}
"""

_LOGO = (
    '<svg width="26" height="26" viewBox="0 0 26 26" aria-hidden="true">'
    '<rect width="26" height="26" rx="6" fill="#0072B2"/>'
    '<path d="M6 7l7 13 7-13" fill="none" stroke="#fff" stroke-width="2.6" '
    'stroke-linecap="round" stroke-linejoin="round"/>'
    '<circle cx="13" cy="7.5" r="1.9" fill="#E69F00"/></svg>'
)


def _shell(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light">'
        '<meta name="referrer" content="same-origin"><link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n<body>{body}</body></html>\n"
    )


def login_page(paths: Paths, message: str | None = None, *, error: bool = False) -> str:
    """The login form (and, after a failed or ended login, why)."""
    note = ""
    if message:
        kind = "error" if error else "info"
        role = "alert" if error else "status"
        note = f'<div class="message {kind}" role="{role}">{esc(message)}</div>'
    body = (
        '<main><form class="login" method="post" '
        f'action="{esc(paths.login)}" autocomplete="off">'
        f'<div class="brand">{_LOGO}<span>veil</span></div>'
        "<h1>Privacy budget dashboard</h1>"
        "<p>Paste the API key an administrator gave you (from <code>veil admin analyst "
        "add</code>). Analysts see their own budgets; administrators see everyone's.</p>"
        f"{note}"
        '<label for="key">API key</label>'
        '<input id="key" name="key" type="password" required spellcheck="false" '
        'autocapitalize="off" maxlength="256" autofocus>'
        '<button type="submit">Log in</button>'
        '<p class="fine">The key is checked once; the browser then keeps only a session '
        "cookie, which ends when you log out, after 8 hours, or when the key is rotated or "
        "revoked.</p></form></main>"
    )
    return _shell("veil · log in", body)


def message_page(paths: Paths, title: str, message: str) -> str:
    """A short page that says one thing (too many requests, say)."""
    body = (
        f'<main><div class="login"><div class="brand">{_LOGO}<span>veil</span></div>'
        f"<h1>{esc(title)}</h1><p>{esc(message)}</p>"
        f'<p><a href="{esc(paths.home)}">Back to the dashboard</a></p></div></main>'
    )
    return _shell(f"veil · {title}", body)


# ------------------------------------------------------------------------------ the page


def _header(ov: Overview, paths: Paths) -> str:
    who = ov.viewer
    return (
        '<header class="top">'
        f'<div class="brand">{_LOGO}<span>veil</span><small>privacy budgets</small></div>'
        f'<div class="who"><span>Signed in as <b>{esc(who.name)}</b></span>'
        f'<span class="role">{esc(who.role)}</span>'
        f'<form method="post" action="{esc(paths.logout)}"><button type="submit">'
        "Log out</button></form></div></header>"
    )


def _tiles(ov: Overview) -> str:
    hot = sum(1 for b in ov.budgets if b.used_share >= Fraction(4, 5))
    tiles = [
        ("Budgets", f"{len(ov.budgets):,}", f"{hot} at 80 % or more" if hot else "all below 80 %"),
        ("Charges", count(ov.charges, ov.counts_capped), "queries and mechanism calls"),
        ("Cache hits", count(ov.cache_hits, ov.counts_capped), "repeated answers, free"),
        ("Alerts", f"{len(ov.alerts):,}", "thresholds crossed"),
    ]
    out = []
    for label, value, note in tiles:
        warn = " warn" if label == "Alerts" and ov.alerts else ""
        out.append(
            f'<div class="tile{warn}"><span>{esc(label)}</span><b>{esc(value)}</b>'
            f"<span>{esc(note)}</span></div>"
        )
    return f'<section class="tiles" aria-label="Summary">{"".join(out)}</section>'


_LEGEND = (
    '<div class="legend"><span><i class="sw spent"></i>spent (released)</span>'
    '<span><i class="sw reserved"></i>reserved (a query running)</span>'
    '<span><i class="sw left"></i>left</span>'
    '<span><i class="sw limit"></i>granted total</span>'
    "<span>hover a number for its exact value</span></div>"
)


def _bar(committed: Fraction, reserved: Fraction, total: Fraction, label: str) -> str:
    return (
        f'<div class="bar" role="img" aria-label="{esc(label)}">'
        f'<span class="spent" style="width:{_width(committed, total)}%"></span>'
        f'<span class="reserved" style="width:{_width(reserved, total)}%"></span></div>'
    )


def _budget_card(b: BudgetView, now: datetime, index: int) -> str:
    unit = b.unit
    hot = " hot" if b.used_share >= Fraction(4, 5) else ""
    label = (
        f"{unit}: {num(b.committed)} spent, {num(b.reserved)} reserved, {num(b.left)} left "
        f"of {num(b.total)}"
    )
    lines = [
        f'<p class="nums"><span class="unit">{unit}</span> '
        f'{_amount(b.committed)} <span class="k">spent</span> · '
        f'{_amount(b.reserved)} <span class="k">reserved</span> · '
        f'{_amount(b.left)} <span class="k">left of</span> {_amount(b.total)}</p>'
    ]
    if b.granted.kind == "approx":
        left = b.remaining.delta
        lines.append(
            f'<p class="nums"><span class="unit">δ</span> '
            f'{_amount(b.spent.delta)} <span class="k">spent</span> · '
            f'{_amount(left)} <span class="k">left of</span> {_amount(b.granted.delta)}</p>'
        )
    if b.granted.kind != "zcdp" and b.spent.rho:
        lines.append(
            f'<p class="nums"><span class="unit">ρ</span> {_amount(b.spent.rho)} '
            '<span class="k">of zCDP charges, converted into ε above</span></p>'
        )
    hits = f"{count(b.cache_hits)} cache hit{'s' * (b.cache_hits != 1)}"
    alerts = f" · {b.alerts} alert{'s' * (b.alerts != 1)}" if b.alerts else ""
    return (
        f'<article class="budget{hot}" data-analyst="{esc(b.analyst)}" '
        f'data-dataset="{esc(b.dataset)}">'
        f'<header><h3><span class="analyst">{esc(b.analyst)}</span><span class="sep">·</span>'
        f'<span class="dataset">{esc(b.dataset)}</span></h3>'
        f'<span class="pct" title="{esc(_exact(b.used_share * 100))} %">'
        f"{esc(_percent(b.used_share))} used</span></header>"
        f"{_bar(b.committed, b.reserved, b.total, label)}"
        f"{''.join(lines)}"
        f"{chart(b, now, index)}"
        f'<p class="meta">{count(b.charges)} charge{"s" * (b.charges != 1)} · {hits}{alerts}</p>'
        "</article>"
    )


def _time_label(at: datetime, span: timedelta) -> str:
    if span <= timedelta(days=1):
        return at.strftime("%H:%M:%S" if span < timedelta(minutes=10) else "%H:%M")
    if span <= timedelta(days=60):
        return at.strftime("%d %b %H:%M")
    return at.strftime("%Y-%m-%d")


def _points(
    steps: tuple[tuple[datetime, Fraction], ...], x: float, width: float
) -> list[tuple[float, Fraction]]:
    """The steps as (x, used) pairs, at most two per unit of width: of the charges that fall in
    one half-unit column only the last is kept (the sum only grows, so the step line drawn
    through them looks the same)."""
    if not steps:
        return []
    start, end = steps[0][0], steps[-1][0]
    seconds = (end - start).total_seconds()
    kept: dict[int, tuple[float, Fraction]] = {}
    for at, value in steps:
        offset = 0.0 if seconds <= 0 else (at - start).total_seconds() / seconds * width
        kept[int(offset * 2)] = (x + offset, value)
    return list(kept.values())


def chart(b: BudgetView, now: datetime, index: int) -> str:
    """Cumulative use of the grant over time as an SVG step chart, from the grant to now, with
    the granted total as a dashed line."""
    w, h = CHART_W, CHART_H
    pw, ph = w - _LEFT - _RIGHT, h - _TOP - _BOTTOM
    total = b.total
    if total <= 0:  # a grant of nothing: scale to what was used, or to 1
        total = max((v for _, v in b.steps), default=Fraction(0)) or Fraction(1)
    start = b.steps[0][0] if b.steps else now
    end = max(now, b.steps[-1][0]) if b.steps else now
    if end <= start:
        end = start + timedelta(seconds=1)
    steps = (*b.steps, (end, b.steps[-1][1] if b.steps else Fraction(0)))
    points = _points(steps, _LEFT, pw)

    def y(v: Fraction) -> float:
        return _TOP + ph - float(min(v, total) / total) * ph

    base = y(Fraction(0))
    path = [f"M{_LEFT:.1f},{base:.1f}"]
    for px, v in points:
        path.append(f"H{px:.1f}V{y(v):.1f}")
    line = "".join(path)
    area = f"{line}V{base:.1f}H{_LEFT:.1f}Z"
    unit = b.unit
    title_id = f"chart-{index}"
    out = [
        f'<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-labelledby="{title_id}">',
        f'<title id="{title_id}">{esc(unit)} used over time by {esc(b.analyst)} on '
        f"{esc(b.dataset)}: {esc(num(b.total - b.left))} of {esc(num(b.total))}</title>",
    ]
    for share, text in ((Fraction(0), "0"), (Fraction(1, 2), num(total * Fraction(1, 2)))):
        gy = y(total * share)
        out.append(
            f'<line class="gridline" x1="{_LEFT}" x2="{w - _RIGHT}" y1="{gy:.1f}" y2="{gy:.1f}"/>'
            f'<text x="{_LEFT - 5}" y="{gy + 3.5:.1f}" text-anchor="end">{esc(text)}</text>'
        )
    top = y(total)
    out.append(
        f'<text x="{_LEFT - 5}" y="{top + 3.5:.1f}" text-anchor="end">{esc(num(total))}</text>'
        f'<text x="{_LEFT + 4}" y="{top - 3:.1f}">{esc(unit)} granted</text>'
    )
    out.append(f'<path class="area" d="{area}"/><path class="line" d="{line}"/>')
    if points:
        lx, lv = points[-1]
        out.append(f'<circle class="dot" cx="{lx:.1f}" cy="{y(lv):.1f}" r="3"/>')
    out.append(
        f'<line class="limit" x1="{_LEFT}" x2="{w - _RIGHT}" y1="{top:.1f}" y2="{top:.1f}"/>'
        f'<line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{base:.1f}"/>'
        f'<line class="axis" x1="{_LEFT}" x2="{w - _RIGHT}" y1="{base:.1f}" y2="{base:.1f}"/>'
    )
    span = end - start
    for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        at = start + span * frac
        tx = _LEFT + pw * frac
        out.append(
            f'<line class="axis" x1="{tx:.1f}" x2="{tx:.1f}" y1="{base:.1f}" y2="{base + 4:.1f}"/>'
            f'<text x="{tx:.1f}" y="{h - 8}" text-anchor="{anchor}">'
            f"{esc(_time_label(at, span))}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _caps(ov: Overview) -> str:
    if not ov.caps:
        return ""
    rows = []
    for dataset, cap, left in ov.caps:
        total, rest = primary(cap), primary(left)
        unit = "ρ" if cap.kind == "zcdp" else "ε"
        label = f"{unit}: {num(total - rest)} used of {num(total)} by all analysts together"
        rows.append(
            f'<article class="budget" data-dataset="{esc(dataset)}"><header><h3>'
            f'<span class="dataset">{esc(dataset)}</span></h3>'
            f'<span class="pct">all analysts</span></header>'
            f"{_bar(total - rest, Fraction(0), total, label)}"
            f'<p class="nums"><span class="unit">{unit}</span> {_amount(total - rest)} '
            f'<span class="k">used · </span>{_amount(rest)} <span class="k">left of</span> '
            f"{_amount(total)}</p></article>"
        )
    return (
        '<h2>Dataset totals <span class="count">(caps across all analysts)</span></h2>'
        f'<div class="grid">{"".join(rows)}</div>'
    )


def _alerts(alerts: tuple[AlertLine, ...]) -> str:
    if not alerts:
        return '<p class="empty">No alerts: no budget has crossed a threshold.</p>'
    items = [
        f'<li><span class="mark" aria-hidden="true">▲</span>{_when(a.at)}'
        f"<b>{esc(a.analyst)} · {esc(a.dataset)}</b><span>{esc(a.detail)}</span></li>"
        for a in alerts[:ALERT_LINES]
    ]
    more = ""
    if len(alerts) > ALERT_LINES:
        more = f'<p class="note">The latest {ALERT_LINES} of {len(alerts):,} alerts.</p>'
    return f'<ul class="alerts">{"".join(items)}</ul>{more}'


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _row(c: Charge) -> str:
    query = "—"
    if c.query:
        flat = " ".join(c.query.split())
        query = (
            f'<code title="{esc(_cut(flat, TITLE_CHARS))}">{esc(_cut(flat, QUERY_CHARS))}</code>'
        )
    fp = "—"
    if c.fingerprint:
        fp = f'<code title="{esc(c.fingerprint)}">{esc(c.fingerprint[:12])}</code>'
    status = esc(c.status or "—")
    hits = f"{c.cache_hits:,}" if c.cache_hits else "—"
    cells = (
        ("Time", "", _when(c.at)),
        ("Analyst", "", esc(c.analyst)),
        ("Dataset", "", esc(c.dataset)),
        ("Query", "q", query),
        ("Fingerprint", "fp", fp),
        ("Cost", "cost", _loss(c.loss)),
        ("Status", "", f'<span class="status {status}">{status}</span>'),
        ("Cache hits", "num", hits),
    )
    # data-label: the column's name, shown beside each value when a narrow screen stacks them
    tds = "".join(
        f'<td class="{css}" data-label="{label}">{value}</td>'
        if css
        else f'<td data-label="{label}">{value}</td>'
        for label, css, value in cells
    )
    return f"<tr>{tds}</tr>"


def _audit(ov: Overview, paths: Paths) -> str:
    download = f'<a href="{esc(paths.csv)}" download>download the full audit trail (CSV)</a>'
    if not ov.audit:
        return f'<p class="empty">No charges yet. When there are, {download} for an audit.</p>'
    if ov.before is not None:
        note = (
            f"{len(ov.audit):,} charges older than #{ov.before}, of "
            f"{count(ov.charges, ov.counts_capped)}; "
            f'<a href="{esc(paths.home)}">the latest</a>; {download}.'
        )
    elif ov.capped:
        total = count(ov.charges, ov.counts_capped)
        note = f"The latest {len(ov.audit):,} of {total} charges; {download}."
    else:
        note = f"All {ov.charges:,} charge{'s' * (ov.charges != 1)}, latest first; {download}."
    if ov.audit_next is not None:
        older = f"{paths.home}?before={ov.audit_next}"
        note += f' <a href="{esc(older)}" rel="next">Older charges</a>'
    head = (
        "<thead><tr><th>Time (UTC)</th><th>Analyst</th><th>Dataset</th><th>Query</th>"
        '<th>Fingerprint</th><th>Cost</th><th>Status</th><th class="num">Cache hits</th>'
        "</tr></thead>"
    )
    body = "".join(_row(c) for c in ov.audit)
    return (
        f'<p class="note">{note}</p><div class="scroll"><table class="audit">{head}'
        f"<tbody>{body}</tbody></table></div>"
    )


def dashboard_page(ov: Overview, paths: Paths) -> str:
    """The overview: budgets with bars and charts, alerts, the latest charges."""
    if ov.budgets:
        cards = "".join(_budget_card(b, ov.now, i) for i, b in enumerate(ov.budgets))
        budgets = f'{_LEGEND}<div class="grid">{cards}</div>'
    elif ov.viewer.is_admin:
        budgets = (
            '<p class="empty">No budgets yet. Grant one with <code>veil budget grant</code> or '
            "<code>POST /v1/admin/grants</code>.</p>"
        )
    else:
        budgets = (
            '<p class="empty">No budget is granted to you yet; ask an administrator for one.</p>'
        )
    scope = "everyone's" if ov.viewer.is_admin else "yours"
    body = (
        f"{_header(ov, paths)}<main>{_tiles(ov)}"
        f'<h2>Budgets <span class="count">({esc(scope)}: {len(ov.budgets):,})</span></h2>'
        f"{budgets}{_caps(ov)}"
        f'<h2>Alerts <span class="count">({len(ov.alerts):,})</span></h2>{_alerts(ov.alerts)}'
        f'<h2>Audit trail <span class="count">(charges)</span></h2>{_audit(ov, paths)}'
        "</main>"
        f"<footer>Rendered {esc(ov.now.strftime('%Y-%m-%d %H:%M:%S'))} UTC · times are UTC · "
        "numbers are rounded to 3 significant digits · "
        f"{AUDIT_ROWS} charges are listed a page</footer>"
    )
    return _shell("veil · privacy budgets", body)

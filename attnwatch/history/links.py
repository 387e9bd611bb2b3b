"""The dashboard's link contract: which page and query parameters reopen a view in one exact state.

A PR comment, an alert, a notification or another dashboard page points at a plot by URL, so
the pages and the parameter names and their encoding are defined once, here, for every writer
(ci.integration.comment, the dashboard's own links) and for the one reader (app/url_state.py, and
the app's navigation for the pages). history owns it because both sides may import history and
neither may import the other.

Encoding: lists are comma-joined (`variants=sdpa,triton_fa2`; names never contain commas),
booleans are `1`/`0`, a commit range is `BASE..HEAD` (git's notation: the commits after BASE up
to and including HEAD). Parameters a view does not use are ignored by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode


@dataclass(frozen=True)
class Page:
    """One dashboard page. `key` names its view, `app/views/<key>.py`, and its URL path under the
    dashboard's root; `title` is its navigation entry and its heading; `icon` its navigation
    icon, a Streamlit `:material/...:` name."""

    key: str
    title: str
    icon: str

    @property
    def script(self) -> str:
        """The view's script, relative to the app's entry point (what st.Page and AppTest take)."""
        return f"views/{self.key}.py"

    @property
    def path(self) -> str:
        """URL path under the dashboard's root: the first page is the root itself."""
        return "" if self.key == PAGES[0].key else self.key


# Every dashboard page, declared once, in the navigation's order; the first is what a link to the
# dashboard opens. The app's navigation, every page's heading and link, the page walks of the tests
# and the docs' page lists are taken from, or checked against, this tuple.
PAGES = (
    Page("push", "This push", ":material/rocket_launch:"),
    Page("overview", "Overview", ":material/dashboard:"),
    Page("trends", "Trends", ":material/show_chart:"),
    Page("compare", "Compare", ":material/compare_arrows:"),
    Page("alerts", "Alerts", ":material/notifications:"),
    Page("kernel", "Kernel", ":material/memory:"),
    Page("sql", "SQL", ":material/terminal:"),
    Page("run", "Run", ":material/receipt_long:"),
)


def page_by_key(key: str) -> Page:
    """The page of `key`; ValueError naming the known ones for any other."""
    for candidate in PAGES:
        if candidate.key == key:
            return candidate
    raise ValueError(f"unknown dashboard page {key!r} (known: {', '.join(p.key for p in PAGES)})")


# Every query parameter a view reads, with what it holds.
PARAMS = {
    "gpu": "GPU model (or device kind): a series' GPU (history.contract.series_key.series_gpu, views' series_gpu)",
    "host": "one pool (host) of that GPU model, the rest of a series' key (history.contract.series_key, series_pool)",
    "branch": "branch whose runs a trend shows (default: the history's default branch)",
    "metric": "stored column plotted, e.g. median_us, gap_to_baseline, tflops",
    "variants": "comma-joined kernel variants",
    "shapes": "comma-joined shape ids",
    "dtype": "fp16, bf16, ...",
    "causal": "1 causal, 0 non-causal",
    "commits": "BASE..HEAD commit range (Trends marks it, Compare compares the newest run of each)",
    "runs": "Trends: how many of the newest runs are plotted",
    "base": "Compare: base run id",
    "head": "Compare: head run id",
    "run": "Run page: run id",
    "variant": "Kernel page: variant",
    "group": "Alerts: BASE..HEAD commit range of an alert group",
    "alert": "Alerts: alert id shown on its trend",
    "log": "1: logarithmic y axis",
    "norm": "1: each series divided by its value at the start of the commit range (or its first run)",
    "sql": "SQL page: the query last run; opening the link runs it and shows its result",
}

RANGE_SEPARATOR = ".."


def join_list(values) -> str:
    return ",".join(str(v) for v in values if str(v))


def split_list(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def commit_range(base: str | None, head: str | None) -> str:
    """`BASE..HEAD`; either side may be empty (an open range)."""
    return f"{base or ''}{RANGE_SEPARATOR}{head or ''}"


@dataclass(frozen=True)
class CommitRange:
    base: str | None
    head: str | None

    def matches_base(self, sha: str | None) -> bool:
        return bool(self.base and sha and sha.startswith(self.base))

    def matches_head(self, sha: str | None) -> bool:
        return bool(self.head and sha and sha.startswith(self.head))


def parse_commit_range(text: str | None) -> CommitRange | None:
    """`BASE..HEAD` (shas or their prefixes) -> CommitRange; a single sha means `..SHA`; None if empty."""
    text = (text or "").strip()
    if not text:
        return None
    if RANGE_SEPARATOR in text:
        base, head = text.split(RANGE_SEPARATOR, 1)
    else:
        base, head = "", text
    return CommitRange(base.strip() or None, head.strip() or None)


def _flag(value: bool) -> str:
    return "1" if value else "0"


def trend_query(
    gpu: str,
    variants,
    shapes,
    dtype: str,
    causal: bool,
    *,
    metric: str = "median_us",
    commits: str | None = None,
    branch: str | None = None,
    host: str | None = None,
) -> dict[str, str]:
    """Query of the Trends page showing these cases on `gpu` (one `host` of it, if given), the
    commit range marked."""
    query = {
        "gpu": gpu,
        "metric": metric,
        "variants": join_list(variants),
        "shapes": join_list(shapes),
        "dtype": dtype,
        "causal": _flag(causal),
    }
    if host:
        query["host"] = host
    if commits:
        query["commits"] = commits
    if branch:
        query["branch"] = branch
    return query


def case_trend_query(
    gpu: str,
    case_id: str,
    *,
    metric: str = "median_us",
    commits: str | None = None,
    branch: str | None = None,
    host: str | None = None,
) -> dict[str, str] | None:
    """Trends query for one case id `variant/shape/dtype/causal|noncausal`; None if it has another form."""
    parts = case_id.split("/")
    if len(parts) != 4 or parts[3] not in ("causal", "noncausal"):
        return None
    variant, shape, dtype, mode = parts
    return trend_query(
        gpu, [variant], [shape], dtype, mode == "causal", metric=metric, commits=commits, branch=branch, host=host
    )


def compare_query(
    gpu: str, *, base: str | None = None, head: str | None = None, commits: str | None = None
) -> dict[str, str]:
    """Compare two runs (by id) or the newest runs of two commits (`commits=BASE..HEAD`)."""
    query = {"gpu": gpu}
    if commits:
        query["commits"] = commits
    else:
        query.update({k: v for k, v in (("base", base), ("head", head)) if v})
    return query


def alert_query(group: str | None = None, alert: int | None = None) -> dict[str, str]:
    query = {}
    if group:
        query["group"] = group
    if alert is not None:
        query["alert"] = str(int(alert))
    return query


def relative(page: str, query: dict[str, str] | None = None) -> str:
    """Link from one dashboard page to another: the page's path and the encoded query."""
    text = urlencode(query or {}, safe=",.")
    return page_by_key(page).path + (f"?{text}" if text else "")


def url(base_url: str, page: str, query: dict[str, str] | None = None) -> str:
    """Absolute link: the dashboard's root URL, the page's path, the encoded query."""
    return f"{base_url.rstrip('/')}/{relative(page, query)}"

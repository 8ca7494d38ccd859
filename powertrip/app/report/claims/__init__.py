"""The paper's claims against our numbers: means with 95 % confidence intervals over seeds,
and a 'holds?' verdict per claim.

Pure functions only (numbers in, rows out), so the verdict logic is tested without running
anything. Callers use the package as one namespace (`from powertrip.app.report import claims as
C`); the work is split by job:

* stats.py: means ± CI, `Sample` (a time to target or a lower bound), `Bound`, formatting;
* verdicts.py: 'holds?' from per-seed bounds, and the thresholds the claims use;
* rows.py: `ClaimRow`, the faster / similar / fastest claims and 'why it may differ';
* files.py: claims.csv and the Markdown summary.
"""

from powertrip.app.report.claims.files import (
    CLAIM_COLUMNS,
    claims_markdown,
    read_claims_csv,
    write_claims_csv,
)
from powertrip.app.report.claims.rows import (
    ClaimRow,
    faster_claim,
    fastest_claim,
    finish,
    similar_claim,
    why_differs,
)
from powertrip.app.report.claims.stats import (
    Bound,
    Estimate,
    Sample,
    fmt_estimate,
    fmt_pct,
    fmt_time,
    growth,
    mean_ci,
    reduction,
    t_critical,
    times_estimate,
)
from powertrip.app.report.claims.verdicts import (
    HOLDS,
    MODEST_GROWTH,
    SIMILAR,
    SMALL_GAIN,
    aggregate,
    holds_below,
    holds_positive,
    holds_similar,
    rank_first,
)

__all__ = [
    "CLAIM_COLUMNS",
    "HOLDS",
    "MODEST_GROWTH",
    "SIMILAR",
    "SMALL_GAIN",
    "Bound",
    "ClaimRow",
    "Estimate",
    "Sample",
    "aggregate",
    "claims_markdown",
    "faster_claim",
    "fastest_claim",
    "finish",
    "fmt_estimate",
    "fmt_pct",
    "fmt_time",
    "growth",
    "holds_below",
    "holds_positive",
    "holds_similar",
    "mean_ci",
    "rank_first",
    "read_claims_csv",
    "reduction",
    "similar_claim",
    "t_critical",
    "times_estimate",
    "why_differs",
    "write_claims_csv",
]

"""Brand analysis (R6, R22): the mention detector run over stored answers, the analyst
tables of the ``analytics`` schema, and the review queue. Pure rules live in
geo_pipeline.domain.mentions and geo_pipeline.domain.stats; this package does the I/O."""

from geo_pipeline.analysis.refresh import refresh_analytics
from geo_pipeline.analysis.review import ReviewError, list_review_queue, resolve
from geo_pipeline.analysis.run import AnalysisSummary, analyse_run

__all__ = [
    "AnalysisSummary",
    "ReviewError",
    "analyse_run",
    "list_review_queue",
    "refresh_analytics",
    "resolve",
]

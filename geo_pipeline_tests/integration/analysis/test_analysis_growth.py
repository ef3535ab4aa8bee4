"""The work PostgreSQL does to analyse a run and refresh its analyst tables grows linearly with
the run: buffers requested in the project's tables and indexes (PostgreSQL's own statistics, so
a fast or slow machine cannot change the verdict), at 1,000 and 10,000 answers. Rows read are
printed, not held: per chunk of 2,000 samples the planner scans a samples table of 11,000 rows
rather than probe its index 2,000 times (rows read 16.9x for 10x the run, buffers 10.6x),
and probes once the table is larger (1k -> 100k answers, bench/_scale_analysis.py: buffers
137x, rows read 167x for 100x)."""

from __future__ import annotations

import time

from geo_pipeline.analysis import analyse_run, refresh_analytics
from geo_pipeline_tests.scale_data import completed_run, counted, quiet_autovacuum

SIZES = (1_000, 10_000)
# 10x the answers may cost at most 12.6x the buffers (log-log slope <= 1.1); a rescan of the
# run per chunk that the planner could not avoid (quadratic) would cost ~50x.
MAX_RATIO = 10**1.1


def test_analysis_and_refresh_work_grow_linearly(db):
    quiet_autovacuum(db)
    work = {}
    for size in SIZES:
        run_id = f"r-grow-{size}"
        assert completed_run(db, run_id, size) == size
        t0 = time.perf_counter()
        with counted(db) as analysis:
            summary = analyse_run(db, run_id, refresh=False)
        t1 = time.perf_counter()
        with counted(db) as refresh:
            refresh_analytics(db, run_id)
        t2 = time.perf_counter()
        assert summary.analysed == size
        work[size] = (analysis, refresh)
        print(f"{size}: analysis {analysis} {t1 - t0:.2f}s, refresh {refresh} {t2 - t1:.2f}s")
    small, large = work[SIZES[0]], work[SIZES[1]]
    for name, a, b in (("analyse_run", small[0], large[0]), ("refresh", small[1], large[1])):
        assert a.buffers > 0 and a.scans > 0, (name, a)
        assert b.buffers <= MAX_RATIO * a.buffers, (name, "buffers", a, b)

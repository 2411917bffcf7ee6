"""Stage 7, report: the run's tables, summary, plots and HTML view; comparison of runs and the regression gate."""

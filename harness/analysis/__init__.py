"""Results judged (pure): comparison rows and the one comparison of a cell against another (`compare.judge`),
significance and intervals, outliers and drift, the answer check, night against night, a bisect's steps, load
families, stack fingerprints, and the one table of metric words and number format (`units`)."""

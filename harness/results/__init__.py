"""What a run leaves: the results folder (`store`, the one module that writes and reads it; `attemptdir`, the one
that names an attempt folder's files), the record, run and bisect schemas, and each bench case's metrics.
Judging them is `harness.analysis`, drawing them `harness.render`, sending them to a tracker `harness.tracker`."""

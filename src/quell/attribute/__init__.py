"""Soroban's attribution of each request's latency to the provider or to the service itself
(seed 004), as plain objects over numbers:

* ``records``: the per-request record's columns (shared with ``quell.instrument``) and their
  check;
* ``features``: records (and a PSI sample series) to a feature matrix;
* ``labels``: the excess each contended request saw, by percentile matching within its class
  (the seed's) and paired by request id (quell replays identical schedules), and how far the two
  differ;
* ``models``: the sparse Gaussian process (GPy to fit, numpy to predict), an exact
  scikit-learn GP on a subsample as its reference, and the baselines (the run-queue wait,
  linear regression, gradient boosting); metrics (R², MAE, interval coverage);
* ``calibration``: the interval made honest for runs the model did not see (split-conformal,
  training runs left out by group, a scale per request class);
* ``bundle``: the versioned JSON model bundle;
* ``export``: provider-attributed latency as a Prometheus histogram and as OpenTelemetry span
  attributes.

Nothing here reads a file or a clock but ``bundle`` (the one file it is given); GPy and
scikit-learn are imported inside ``fit`` only.
"""

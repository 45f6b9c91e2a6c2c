"""Why a server died or hung, from its log: the signatures as data, the classifier, the advice a verdict gives,
and torch-profiler traces summarised."""

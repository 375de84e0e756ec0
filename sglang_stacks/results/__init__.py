"""Results: what the load generator's document says, benchmark statistics and verdicts, the
results history, compare, the regression gate, promote and plots. Dependencies point down: the command
and formatting modules (compare, plot) use the others, never the reverse."""

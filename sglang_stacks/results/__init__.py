"""Results: the load generator shipped to hosts, benchmark statistics, the results history,
compare, the regression gate, promote and plots."""
